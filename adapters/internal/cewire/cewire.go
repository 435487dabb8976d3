// Package cewire is CloudEvents on the wire: the one place that maps runner
// messages to CloudEvents and back, so the CloudEvents transformer, the
// CloudEvents sink and the HTTP source agree on every attribute, and the
// HTTP client, reply budget, retry floor and worker pool the transformer
// and the sink post with.
//
// Message -> event:
//
//   - id: Message.ID (surrounding spaces trimmed; an empty id is an error).
//   - source: the "ce-source" header when it holds a URI-reference, else
//     MV_CE_SOURCE (default /monovertex/<MV_NAME>, or
//     /apis/v1/namespaces/<NAMESPACE>/monovertices/<MV_NAME> where Knative
//     sets NAMESPACE).
//   - type: the "ce-type" header when set, else MV_CE_TYPE.
//   - subject, dataschema: the "ce-subject" and "ce-dataschema" headers.
//   - time: Message.EventTime (omitted when zero or outside years 0-9999).
//   - datacontenttype: the "content-type" header when it parses as a media type.
//   - partitionkey: Message.Keys, see EncodeKeys.
//   - every other header whose name is a valid extension name (a-z0-9, 1 to
//     20 characters, not an attribute of the spec, not partitionkey) and whose
//     value is valid UTF-8 without control characters becomes an extension;
//     the others are dropped with a debug log.
//   - data: Message.Value.
//
// Event -> message is the inverse: the context attributes come back as the
// "ce-*" and "content-type" headers, extensions as headers (non-string
// values in their canonical string form), partitionkey as Keys. Headers whose
// names contain a dash never collide with extensions, so they can carry the
// context attributes through the engine unchanged: a function's reply type
// and source reach the sink as the function set them.
package cewire

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner"
)

// Header names on runner.Message that carry CloudEvents context attributes.
// They contain a dash, so no extension can have the same name.
const (
	HeaderContentType = "content-type"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderSubject     = "ce-subject"
	HeaderDataSchema  = "ce-dataschema"
)

// PartitionKeyExtension is the extension that carries Message.Keys
// (the CloudEvents partitioning extension).
const PartitionKeyExtension = "partitionkey"

// DefaultType is the event type when neither the message nor MV_CE_TYPE says otherwise.
const DefaultType = "dev.monovertex.message"

// MaxExtensionNameLength is the longest extension name the spec allows.
const MaxExtensionNameLength = 20

// Config holds the attributes of events the runner produces. Adapters that
// speak CloudEvents embed it in their settings.
type Config struct {
	Source string `envconfig:"MV_CE_SOURCE" desc:"CloudEvents source of events the runner produces when the message carries none (default /monovertex/<MV_NAME>, or /apis/v1/namespaces/<NAMESPACE>/monovertices/<MV_NAME> where NAMESPACE is set)"`
	Type   string `envconfig:"MV_CE_TYPE" default:"dev.monovertex.message" desc:"CloudEvents type of events the runner produces when the message carries none"`
	// Namespace is the namespace Knative's source controllers set for an
	// adapter; with it the default source names the runner as Knative's
	// sources name themselves (/apis/v1/namespaces/<ns>/pingsources/<name>).
	CACerts   string `envconfig:"K_CA_CERTS" desc:"PEM of CAs trusted, besides the system's, for https:// receivers and functions (Knative injects it with transport-encryption), or the path of a PEM file, read again when it changes"`
	Namespace string `envconfig:"NAMESPACE" desc:"namespace Knative sets for an adapter: the default CloudEvents source becomes /apis/v1/namespaces/<NAMESPACE>/monovertices/<MV_NAME>"`
}

// Validate checks MV_CE_SOURCE and MV_CE_TYPE.
func (c *Config) Validate() error {
	if c.Source != "" {
		if _, err := url.Parse(c.Source); err != nil {
			return &runner.ConfigError{Var: "MV_CE_SOURCE", Value: c.Source, Reason: "must be a URI-reference such as /monovertex/my-vertex or https://example.com/orders"}
		}
	}
	if _, err := LoadTrust(c.CACerts); err != nil {
		v := c.CACerts
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return &runner.ConfigError{Var: "K_CA_CERTS", Value: v, Reason: err.Error()}
	}
	if c.Type != "" && !validString(c.Type) {
		return &runner.ConfigError{Var: "MV_CE_TYPE", Value: c.Type, Reason: "must be printable text such as dev.monovertex.message"}
	}
	return nil
}

// Mapper converts between messages and events with the configured defaults.
type Mapper struct {
	source types.URIRef
	typ    string
	log    *zap.SugaredLogger
}

// New builds a Mapper; name is MV_NAME, used in the default source.
func New(cfg Config, name string, log *zap.SugaredLogger) (*Mapper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	src := cfg.Source
	switch {
	case src != "":
	case cfg.Namespace != "":
		src = "/apis/v1/namespaces/" + url.PathEscape(cfg.Namespace) + "/monovertices/" + url.PathEscape(name)
	default:
		src = "/monovertex/" + url.PathEscape(name)
	}
	u, err := url.Parse(src)
	if err != nil {
		return nil, &runner.ConfigError{Var: "MV_CE_SOURCE", Value: src, Reason: "must be a URI-reference"}
	}
	typ := strings.TrimSpace(cfg.Type)
	if typ == "" {
		typ = DefaultType
	}
	return &Mapper{source: types.URIRef{URL: *u}, typ: typ, log: log}, nil
}

// specAttributes are names an extension must not take.
var specAttributes = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true,
	"datacontenttype": true, "dataschema": true, "subject": true, "time": true,
	"data": true, "datacontentencoding": true, "schemaurl": true,
	PartitionKeyExtension: true,
}

// KnativeKafkaHeaderPrefix starts the extensions in which a Knative
// KafkaSource delivers a record's headers (kafkaheader<name>). It makes
// them at any length, so they may be longer than MaxExtensionNameLength
// (a SHOULD of the spec): a Trigger filtering on one must find it.
const KnativeKafkaHeaderPrefix = "kafkaheader"

// maxKafkaHeaderExtension bounds those names all the same.
const maxKafkaHeaderExtension = 255

// ValidExtensionName reports whether name may be used as an extension:
// lower-case letters and digits, 1 to 20 characters (up to 255 for
// KnativeKafkaHeaderPrefix's), not a spec attribute.
func ValidExtensionName(name string) bool {
	most := MaxExtensionNameLength
	if strings.HasPrefix(name, KnativeKafkaHeaderPrefix) {
		most = maxKafkaHeaderExtension
	}
	if name == "" || len(name) > most || specAttributes[name] {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// validString reports whether s may be a CloudEvents String: valid UTF-8
// without control characters (U+0000-U+001F, U+007F-U+009F).
func validString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

// ErrInvalidID is returned for a message whose id cannot be an event id.
var ErrInvalidID = errors.New("cewire: message id must be non-empty printable text")

// ToEvent maps a message to a CloudEvent. It fails only when the message id
// cannot be an event id; unusable headers are dropped with a debug log.
func (m *Mapper) ToEvent(msg *runner.Message) (event.Event, error) {
	ev := event.New(event.CloudEventsVersionV1)
	ec := ev.Context.(*event.EventContextV1)
	id := strings.TrimSpace(msg.ID)
	if id == "" || !validString(id) {
		return ev, fmt.Errorf("%w: got %q", ErrInvalidID, msg.ID)
	}
	ec.ID = id
	ec.Source = m.source
	ec.Type = m.typ
	if t := msg.EventTime; !t.IsZero() {
		if y := t.UTC().Year(); y >= 0 && y <= 9999 {
			ec.Time = &types.Timestamp{Time: t.UTC()}
		} else {
			m.log.Debugw("event time outside years 0-9999 dropped", "id", id, "time", t)
		}
	}
	if len(msg.Keys) > 0 {
		ec.Extensions = map[string]any{PartitionKeyExtension: EncodeKeys(msg.Keys)}
	}
	var contentType string
	for name, value := range msg.Headers {
		switch name {
		case HeaderContentType:
			if _, _, err := mime.ParseMediaType(value); err != nil || !validString(value) {
				m.log.Debugw("invalid content-type header dropped", "id", id, "value", value)
				continue
			}
			contentType = strings.TrimSpace(value)
			continue
		case HeaderSource:
			u, err := url.Parse(value)
			if err != nil || strings.TrimSpace(value) == "" || !validString(value) {
				m.log.Debugw("invalid ce-source header dropped", "id", id, "value", value)
				continue
			}
			ec.Source = types.URIRef{URL: *u}
			continue
		case HeaderType:
			if v := strings.TrimSpace(value); v != "" && validString(v) {
				ec.Type = v
			} else {
				m.log.Debugw("invalid ce-type header dropped", "id", id, "value", value)
			}
			continue
		case HeaderSubject:
			if v := strings.TrimSpace(value); v != "" && validString(v) {
				ec.Subject = &v
			} else {
				m.log.Debugw("invalid ce-subject header dropped", "id", id, "value", value)
			}
			continue
		case HeaderDataSchema:
			u, err := url.Parse(strings.TrimSpace(value))
			if err != nil || !u.IsAbs() || !validString(value) {
				m.log.Debugw("invalid ce-dataschema header dropped (must be an absolute URI)", "id", id, "value", value)
				continue
			}
			ec.DataSchema = &types.URI{URL: *u}
			continue
		}
		if !ValidExtensionName(name) {
			m.log.Debugw("header dropped: not a valid CloudEvents extension name (a-z0-9, at most 20 characters)", "id", id, "header", name)
			continue
		}
		if !validString(value) {
			m.log.Debugw("header dropped: value is not valid UTF-8 text", "id", id, "header", name)
			continue
		}
		if ec.Extensions == nil {
			ec.Extensions = map[string]any{}
		}
		ec.Extensions[name] = value
	}
	if contentType != "" {
		ec.DataContentType = &contentType
	}
	if len(msg.Value) > 0 {
		ev.DataEncoded = msg.Value
		// Structured mode writes bytes as data_base64, except JSON it can
		// inline; binary mode sends them as the body either way.
		ev.DataBase64 = !(isJSON(contentType) && jsonValid(msg.Value))
	}
	return ev, nil
}

// ToMessage maps an event back to a message (see the package comment).
// Offset is left to the caller.
func ToMessage(ev *event.Event) (*runner.Message, error) {
	if ev == nil || ev.Context == nil {
		return nil, errors.New("cewire: no event")
	}
	msg := &runner.Message{
		ID:      ev.ID(),
		Headers: map[string]string{},
	}
	if d := ev.Data(); len(d) > 0 {
		msg.Value = d
	}
	if t := ev.Time(); !t.IsZero() {
		msg.EventTime = t
	}
	if s := ev.Source(); s != "" {
		msg.Headers[HeaderSource] = s
	}
	if t := ev.Type(); t != "" {
		msg.Headers[HeaderType] = t
	}
	if s := ev.Subject(); s != "" {
		msg.Headers[HeaderSubject] = s
	}
	if s := ev.DataSchema(); s != "" {
		msg.Headers[HeaderDataSchema] = s
	}
	if ct := ev.DataContentType(); ct != "" {
		msg.Headers[HeaderContentType] = ct
	}
	for name, value := range extensions(ev) {
		s, err := types.Format(value)
		if err != nil {
			return nil, fmt.Errorf("cewire: event %s: extension %s: %w", ev.ID(), name, err)
		}
		if name == PartitionKeyExtension {
			msg.Keys = DecodeKeys(s)
			continue
		}
		msg.Headers[name] = s
	}
	return msg, nil
}

// extensions returns ev's extensions for reading: a 1.0 event's own map,
// where Extensions() copies it for every call.
func extensions(ev *event.Event) map[string]any {
	if ec, ok := ev.Context.(*event.EventContextV1); ok {
		return ec.Extensions
	}
	return ev.Extensions()
}

// isJSON reports whether the SDK inlines data of this content type as JSON
// in structured mode. Writer and reader must agree, and the reader compares
// the media type as written, so this does too.
func isJSON(contentType string) bool {
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = strings.TrimSpace(mt[:i])
	}
	return mt == "application/json" || mt == "text/json"
}

// jsonValid reports whether b can be inlined as the data member and read
// back byte for byte: valid JSON and UTF-8, no surrounding white space.
func jsonValid(b []byte) bool {
	if len(b) == 0 || isSpace(b[0]) || isSpace(b[len(b)-1]) {
		return false
	}
	return utf8.Valid(b) && json.Valid(b)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ValidID reports whether id can be an event id once trimmed: non-empty
// printable UTF-8.
func ValidID(id string) bool {
	id = strings.TrimSpace(id)
	return id != "" && validString(id)
}
