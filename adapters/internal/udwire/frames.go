package udwire

import (
	"encoding/binary"
)

// HTTP/2 frame types and flags (RFC 9113 section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePriority     = 0x2
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingEnablePush        = 0x2
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
	settingMaxHeaderListSize = 0x6
	settingEnableConnect     = 0x8

	errCodeNo          = 0x0
	errCodeProtocol    = 0x1
	errCodeFlow        = 0x3
	errCodeRefused     = 0x7
	errCodeCancel      = 0x8
	errCodeCalm        = 0xb
	errCodeSecurity    = 0xc
	errCodeFrameSize   = 0x6
	errCodeCompression = 0x9

	frameHeaderLen  = 9
	defaultWindow   = 65535
	defaultMaxFrame = 16384
	// maxReadFrame is the largest frame this client accepts, and says so
	// in its SETTINGS: servers that honour it (grpc-go does not; it sends
	// 16 KiB) send fewer frame headers per message.
	maxReadFrame = 1 << 20
	// maxWindow is HTTP/2's largest flow-control window.
	maxWindow = 1<<31 - 1
	// DefaultMaxHeaderListSize is the largest header list (HPACK-decoded,
	// each field counted as its name, its value and 32 bytes, RFC 9113
	// section 6.5.2) a response may carry: grpc-go's client default
	// (defaultClientMaxHeaderListSize in its internal/transport, 16 MiB).
	DefaultMaxHeaderListSize = 16 << 20
	// hpackChunk is how much of a header block the decoder is given at a
	// time, so that a block over the limit stops being decoded soon after
	// the limit, not at its end.
	hpackChunk = 4 << 10
)

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func appendFrameHeader(b []byte, length int, typ, flags byte, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), typ, flags,
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(b, id), v)
}

func appendWindowUpdate(b []byte, stream uint32, inc uint32) []byte {
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, inc)
}

// frameName is the RFC's name of a frame type, for errors.
func frameName(typ byte) string {
	switch typ {
	case frameData:
		return "DATA"
	case frameHeaders:
		return "HEADERS"
	case framePriority:
		return "PRIORITY"
	case frameRSTStream:
		return "RST_STREAM"
	case frameSettings:
		return "SETTINGS"
	case framePushPromise:
		return "PUSH_PROMISE"
	case framePing:
		return "PING"
	case frameGoAway:
		return "GOAWAY"
	case frameWindowUpdate:
		return "WINDOW_UPDATE"
	case frameContinuation:
		return "CONTINUATION"
	}
	return "unknown"
}
