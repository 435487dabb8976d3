package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSameHeadersAreTheRunners checks the loop writes the four headers the
// runner's kafka->kafka adds to a keyed record, after the input's own.
func TestSameHeadersAreTheRunners(t *testing.T) {
	r := &kgo.Record{Topic: "in-7", Partition: 3, Offset: 42, Key: []byte("k9"), Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("b")}}}
	got := sameHeaders(r)
	want := []string{"a=b", "X-NF-Kafka-TopicName=in-7", "__key_len=1", "__key_0=k9", "Mv-Msg-Id=in-7:3:42"}
	if len(got) != len(want) {
		t.Fatalf("got %d headers %v, want %v", len(got), got, want)
	}
	for i, h := range got {
		if s := h.Key + "=" + string(h.Value); s != want[i] {
			t.Errorf("header %d = %s, want %s", i, s, want[i])
		}
	}
	if h := sameHeaders(&kgo.Record{Topic: "t"}); len(h) != 3 || string(h[1].Value) != "0" {
		t.Errorf("an unkeyed record: %v, want the topic, __key_len=0 and the ID", h)
	}
}
