package protoconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSONCodecs are the Connect protocol's JSON codecs ("json" and
// "json; charset=utf-8") as freqcap serve speaks them: field names as in
// the .proto (snake_case; lowerCamelCase is accepted too), every field
// written, zero values included (an answer reads the same whatever it
// holds), and unknown fields refused (a misspelt field would otherwise be
// ignored silently: "cots": 5 would take 1).
func JSONCodecs() []connect.Option {
	return []connect.Option{
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
	}
}

var (
	marshalJSON   = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	unmarshalJSON = protojson.UnmarshalOptions{}
)

type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("protoconv: %T is not a protobuf message", m)
	}
	return marshalJSON.Marshal(pm)
}

func (c jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("protoconv: %T is not a protobuf message", m)
	}
	return marshalJSON.MarshalAppend(dst, pm)
}

func (c jsonCodec) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("protoconv: %T is not a protobuf message", m)
	}
	if len(data) == 0 {
		return errors.New("empty body: want a JSON object")
	}
	if err := unmarshalJSON.Unmarshal(data, pm); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// MarshalStable is Marshal, compacted (protojson varies its spacing).
func (c jsonCodec) MarshalStable(m any) ([]byte, error) {
	b, err := c.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func (c jsonCodec) IsBinary() bool { return false }
