package udcodec

import (
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func appendBytes(b, v []byte) []byte { return protowire.AppendBytes(b, v) }
