package cewire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/monovertex/monovertex/runner"
)

// Mode is how an event travels in an HTTP request.
type Mode string

// The content modes of the CloudEvents HTTP binding that the runner sends.
const (
	// ModeBinary puts the attributes in ce-* headers and the data in the body.
	ModeBinary Mode = "binary"
	// ModeStructured sends the whole event as application/cloudevents+json.
	ModeStructured Mode = "structured"
)

// ParseMode checks a configured content mode.
func ParseMode(v string) (Mode, error) {
	switch Mode(strings.ToLower(strings.TrimSpace(v))) {
	case "", ModeBinary:
		return ModeBinary, nil
	case ModeStructured:
		return ModeStructured, nil
	}
	return "", fmt.Errorf("unknown content mode %q: use binary or structured", v)
}

// BatchContentType is the media type of a JSON array of events.
const BatchContentType = event.ApplicationCloudEventsBatchJSON

// ErrNotCloudEvent means an HTTP message carries no CloudEvent: no ce-specversion
// header and no CloudEvents content type.
var ErrNotCloudEvent = errors.New("not a CloudEvent: no ce-specversion header and no application/cloudevents content type")

// WriteRequest makes req a POST of ev in mode. In binary mode, an event
// with an attribute value that cannot travel in an HTTP header unchanged
// (non-ASCII or control characters, surrounding spaces) is sent structured
// instead: the receiver must support both modes anyway.
func WriteRequest(ctx context.Context, req *http.Request, ev *event.Event, mode Mode) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("invalid event %s: %w", ev.ID(), err)
	}
	req.Method = http.MethodPost
	if mode == ModeBinary && headerSafe(ev) {
		if writeBinary(req, ev) {
			return nil
		}
		ctx = binding.WithForceBinary(ctx)
	} else {
		ctx = binding.WithForceStructured(ctx)
	}
	return cehttp.WriteRequest(ctx, binding.ToMessage(ev), req)
}

// writeBinary writes a CloudEvents 1.0 event whose extensions are all
// strings with valid names as a binary-mode request: the headers the
// SDK's binding writes, byte for byte and in the same way (attributes
// appended to what req already has, extensions replacing it), and the data
// as the body. It reports false, having written nothing, for any other
// event, which the SDK then writes. The SDK's path looks each attribute
// up in its spec table, copies the whole context through an interface and
// formats every value (44 allocations per mapped and written 1 KiB
// message in BenchmarkWriteBinaryRequest, 34 this way);
// FuzzBinaryRequestMatchesTheSDK holds the two to the same output.
func writeBinary(req *http.Request, ev *event.Event) bool {
	ec, ok := ev.Context.(*event.EventContextV1)
	if !ok {
		return false
	}
	for name, v := range ec.Extensions {
		if _, ok := v.(string); !ok || !extensionNameSyntax(name) {
			return false
		}
	}
	h := req.Header
	if h == nil {
		h = http.Header{}
		req.Header = h
	}
	// The values share one backing array (each header its own
	// full-capacity slice of it, so an append to one copies): a slice per
	// header was a fifth of this function's allocations.
	vals := make([]string, 0, 8)
	set := func(key, v string) {
		vals = append(vals, v)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	// The SDK treats an empty attribute as missing.
	add := func(key, v string) {
		switch {
		case v == "":
		case len(h[key]) > 0:
			h[key] = append(h[key], v)
		default:
			set(key, v)
		}
	}
	add("Ce-Id", ec.ID)
	add("Ce-Source", ec.Source.String())
	add("Ce-Specversion", event.CloudEventsVersionV1)
	add("Ce-Type", ec.Type)
	if ec.DataContentType != nil {
		add("Content-Type", *ec.DataContentType)
	}
	if ec.DataSchema != nil {
		add("Ce-Dataschema", ec.DataSchema.String())
	}
	if ec.Subject != nil {
		add("Ce-Subject", *ec.Subject)
	}
	if ec.Time != nil && !ec.Time.IsZero() {
		add("Ce-Time", types.FormatTime(ec.Time.Time))
	}
	for name, v := range ec.Extensions {
		set(extensionHeader(name), v.(string))
	}
	if data := ev.Data(); len(data) > 0 {
		// net/http sees through io.NopCloser to a *bytes.Reader and knows
		// the body is in memory, so it writes headers and body together.
		req.Body = io.NopCloser(bytes.NewReader(data))
		req.ContentLength = int64(len(data))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	}
	return true
}

// partitionKeyHeader is extensionHeader(PartitionKeyExtension), which
// every keyed message carries.
var partitionKeyHeader = "Ce-" + strings.ToUpper(PartitionKeyExtension[:1]) + PartitionKeyExtension[1:]

// extensionHeader is the SDK's header name for an extension: "Ce-" and
// the name with its first letter upper case.
func extensionHeader(name string) string {
	if name == PartitionKeyExtension {
		return partitionKeyHeader
	}
	return "Ce-" + strings.ToUpper(name[:1]) + name[1:]
}

// extensionNameSyntax reports whether name has the form the spec gives
// extension names (a-z, 0-9), whatever the name; ValidExtensionName also
// refuses the names this package maps itself, such as partitionkey.
func extensionNameSyntax(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return name != ""
}

// headerSafe reports whether every attribute of ev survives as an HTTP header
// value: printable ASCII without surrounding spaces.
func headerSafe(ev *event.Event) bool {
	ok := func(s string) bool {
		if s == "" {
			return true
		}
		if s[0] == ' ' || s[len(s)-1] == ' ' {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return false
			}
		}
		return true
	}
	if !ok(ev.ID()) || !ok(ev.Source()) || !ok(ev.Type()) || !ok(ev.Subject()) ||
		!ok(ev.DataSchema()) || !ok(ev.DataContentType()) {
		return false
	}
	for _, v := range extensions(ev) {
		s, err := types.Format(v)
		if err != nil || !ok(s) {
			return false
		}
	}
	return true
}

// IsCloudEvent reports whether an HTTP message with these headers claims to
// carry CloudEvents (binary, structured or batch).
func IsCloudEvent(h http.Header) bool {
	if _, ok := h["Ce-Specversion"]; ok {
		return true
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return strings.HasPrefix(mt, "application/cloudevents")
}

// ReadEvents decodes the CloudEvents in an HTTP request or response whose
// body is already read: one event in binary or structured mode, or any
// number in a batch. Every event is validated. It returns ErrNotCloudEvent
// when the message does not claim to be a CloudEvent.
func ReadEvents(h http.Header, body []byte) ([]event.Event, error) {
	return ReadEventsLimited(context.Background(), h, body, 0, nil)
}

// EventOverhead is what one decoded event costs in memory beyond its bytes
// on the wire (the event, its message and their maps), as charged to a
// reply's Lease.
const EventOverhead = 1 << 10

// ErrTooManyEvents means a batch holds more events than one input may
// produce.
var ErrTooManyEvents = errors.New("batch holds more events than allowed")

// ReadEventsLimited is ReadEvents with bounds on what decoding may hold: a
// batch of more than maxEvents events (when maxEvents > 0) is
// ErrTooManyEvents, found before the events past the bound are decoded,
// and every decoded event is charged to lease (its bytes plus
// EventOverhead) as it is decoded, so a reply that fans out hugely stops at
// the budget instead of at the end of the batch. A binary-mode event's data
// is body itself, not a copy: the caller must not write into body later.
func ReadEventsLimited(ctx context.Context, h http.Header, body []byte, maxEvents int, lease *Lease) ([]event.Event, error) {
	events, err := readEvents(ctx, h, body, maxEvents, lease)
	if err != nil {
		return nil, err
	}
	for i := range events {
		if _, err := ToMessage(&events[i]); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// ReadMessagesLimited is ReadEventsLimited that returns the events mapped
// to messages (ToMessage), each mapped once. Offsets are left to the caller.
func ReadMessagesLimited(ctx context.Context, h http.Header, body []byte, maxEvents int, lease *Lease) ([]*runner.Message, error) {
	events, err := readEvents(ctx, h, body, maxEvents, lease)
	if err != nil {
		return nil, err
	}
	msgs := make([]*runner.Message, len(events))
	for i := range events {
		if msgs[i], err = ToMessage(&events[i]); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// readEvents decodes and validates the events of ReadEventsLimited; the
// callers map them.
func readEvents(ctx context.Context, h http.Header, body []byte, maxEvents int, lease *Lease) ([]event.Event, error) {
	if !IsCloudEvent(h) {
		return nil, ErrNotCloudEvent
	}
	if err := checkCEHeaders(h); err != nil {
		return nil, err
	}
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	var events []event.Event
	switch msg.ReadEncoding() {
	case binding.EncodingBatch:
		evs, err := decodeBatch(ctx, body, maxEvents, lease)
		if err != nil {
			return nil, err
		}
		events = evs
	case binding.EncodingBinary, binding.EncodingStructured:
		if err := lease.Grow(ctx, int64(len(body))+EventOverhead); err != nil {
			return nil, err
		}
		ev, err := toEvent(msg, body)
		if err != nil {
			return nil, fmt.Errorf("malformed CloudEvent: %w", err)
		}
		events = []event.Event{*ev}
	default:
		if v := h.Get("Ce-Specversion"); v != "" {
			return nil, fmt.Errorf("unsupported CloudEvents specversion %q: use 1.0", v)
		}
		return nil, fmt.Errorf("unsupported CloudEvents content type %q: use application/cloudevents+json, application/cloudevents-batch+json or binary mode", h.Get("Content-Type"))
	}
	for i := range events {
		if err := events[i].Validate(); err != nil {
			return nil, fmt.Errorf("invalid CloudEvent %q: %w", events[i].ID(), err)
		}
	}
	return events, nil
}

// toEvent decodes the one event of msg, whose body is body. In binary mode
// body becomes the event's data as it is: the SDK would copy it into a
// buffer of its own (binding.ToEvent reads BodyReader to its end), and body
// is already a buffer that only this event will hold. A 1.0 event's
// attributes are read by binaryEvent, any other's by the SDK.
func toEvent(msg *cehttp.Message, body []byte) (*event.Event, error) {
	binary := msg.ReadEncoding() == binding.EncodingBinary
	if binary {
		if ev, ok, err := binaryEvent(msg.Header); ok {
			if err != nil {
				return nil, err
			}
			if len(body) > 0 {
				ev.DataEncoded = body
			}
			return ev, nil
		}
		msg.BodyReader = nil
	}
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return nil, err
	}
	if binary && len(body) > 0 {
		ev.DataEncoded = body
	}
	return ev, nil
}

// binaryEvent reads the attributes of a binary-mode CloudEvents 1.0 event
// from h as the SDK's binding does (cehttp.Message.ReadBinary into
// binding.ToEvent): the first value of each header, attributes by their
// exact header names, any other "Ce-" header as an extension named by the
// rest with its first letter lower case, each through the same setter of
// event.EventContextV1. It skips the binding's spec lookups, interface
// conversions and name building (six allocations fewer per reply in
// BenchmarkTransform1KiB). ok is false, with no event, for any other
// specversion or a header the binding would panic on;
// FuzzBinaryEventMatchesTheSDK holds the two to the same event or to both
// failing.
func binaryEvent(h http.Header) (ev *event.Event, ok bool, err error) {
	if h.Get("Ce-Specversion") != event.CloudEventsVersionV1 {
		return nil, false, nil
	}
	ec := &event.EventContextV1{}
	for k, vv := range h {
		if len(vv) == 0 || k == "Ce-" {
			// The binding would index past the end (and panic); what was
			// read so far is dropped with ec.
			return nil, false, nil
		}
		v := vv[0]
		switch k {
		case "Ce-Id":
			err = ec.SetID(v)
		case "Ce-Source":
			err = ec.SetSource(v)
		case "Ce-Specversion":
			// Read above; the binding sets nothing for it.
		case "Ce-Type":
			err = ec.SetType(v)
		case "Content-Type":
			err = ec.SetDataContentType(v)
		case "Ce-Dataschema":
			err = ec.SetDataSchema(v)
		case "Ce-Subject":
			err = ec.SetSubject(v)
		case "Ce-Time":
			t, terr := types.ToTime(v)
			if terr != nil {
				return nil, true, fmt.Errorf("invalid value for time: %#v", v)
			}
			err = ec.SetTime(t)
		default:
			if !strings.HasPrefix(k, "Ce-") {
				continue
			}
			// The binding lowers the name's first letter; SetExtension
			// lowers the whole name (and checks it) either way, so only
			// the name every keyed message carries is given lowered, which
			// spares SetExtension a copy.
			name := k[len("Ce-"):]
			if name == partitionKeyHeader[len("Ce-"):] {
				name = PartitionKeyExtension
			}
			err = ec.SetExtension(name, v)
		}
		if err != nil {
			return nil, true, err
		}
	}
	return &event.Event{Context: ec}, true, nil
}

// decodeBatch decodes a JSON array of events one at a time, as the SDK's
// batch decoding reads it (null is no event; bytes after the array are
// ignored), stopping at maxEvents and charging lease per event.
func decodeBatch(ctx context.Context, body []byte, maxEvents int, lease *Lease) ([]event.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("malformed CloudEvents batch: %w", err)
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("malformed CloudEvents batch: want a JSON array of events, got %v", tok)
	}
	var events []event.Event
	for dec.More() {
		if maxEvents > 0 && len(events) >= maxEvents {
			return nil, fmt.Errorf("%w: more than %d", ErrTooManyEvents, maxEvents)
		}
		start := dec.InputOffset()
		var ev event.Event
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("malformed CloudEvents batch: event %d: %w", len(events), err)
		}
		if err := lease.Grow(ctx, dec.InputOffset()-start+EventOverhead); err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("malformed CloudEvents batch: %w", err)
	}
	return events, nil
}

// checkCEHeaders rejects ce-* header names that the SDK cannot read: it
// indexes past the prefix without a check, and an attribute name must be
// letters and digits anyway.
func checkCEHeaders(h http.Header) error {
	for k := range h {
		if len(k) < 3 || !strings.EqualFold(k[:3], "ce-") {
			continue
		}
		name := k[3:]
		if name == "" || len(name) > 64 {
			return fmt.Errorf("invalid CloudEvents header %q", k)
		}
		for i := 0; i < len(name); i++ {
			c := name[i] | 0x20
			if (c < 'a' || c > 'z') && (name[i] < '0' || name[i] > '9') {
				return fmt.Errorf("invalid CloudEvents header %q: attribute names are letters and digits", k)
			}
		}
	}
	return nil
}
