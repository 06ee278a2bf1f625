// Package minimal is the smallest message type the contract allows: example.Example's
// four methods (Name, Decode, NewHandler, Template) and none of the optional interfaces.
// Tests run it through the consumer's wiring and through the tools, to show what a
// production message type gets without writing anything for the demo or the suites:
// the consumer runs it, and every tool that needs more says which interface to
// implement.
//
// A note {"note_id": "n-1"} is put in the notes table, once.
package minimal

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example/strict"
	"github.com/idemgo/sqs-lambda-consumer/idem"
	"github.com/idemgo/sqs-lambda-consumer/internal/envconf"
)

// TableVar is the variable of the block that names the notes table.
const TableVar = "NOTES_TABLE"

//go:embed template.yaml
var block []byte

// Example is the minimal message type.
type Example struct{}

var _ example.Example = Example{}

// ErrInvalidNote is wrapped by Decode's errors.
var ErrInvalidNote = example.NewInvalid("minimal: invalid note")

var decoder = strict.Decoder{
	Fields:  []string{"note_id"},
	Invalid: func(msg string) error { return fmt.Errorf("%w: %s", ErrInvalidNote, msg) },
}

// Name is "minimal".
func (Example) Name() string { return "minimal" }

// Decode validates a note: key "note:" + note_id, one group per note.
func (Example) Decode(body []byte) (example.Message, error) {
	var id string
	err := decoder.Object(body, func(name string, raw json.RawMessage) (err error) {
		id, err = decoder.ID(name, raw, 128)
		return err
	})
	if err != nil {
		return example.Message{}, err
	}
	return example.Message{ID: id, Key: "note:" + id, Group: id, Body: string(body)}, nil
}

// NewHandler reads NOTES_TABLE and returns the handler: the note's item, committed with
// the completion of its key.
func (ex Example) NewHandler(d example.Deps) (idem.Handler, error) {
	e := envconf.New(d.Env)
	table := e.Required(TableVar)
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("minimal configuration: %w", err)
	}
	return idem.HandlerFunc(func(_ context.Context, req *idem.Request) (idem.Result, error) {
		m, err := ex.Decode(req.Payload)
		if err != nil {
			return idem.Result{}, idem.Permanent(err)
		}
		return idem.Result{
			Response: req.Payload,
			Writes: []types.TransactWriteItem{{Put: &types.Put{
				TableName: aws.String(table),
				Item:      map[string]types.AttributeValue{"note_id": &types.AttributeValueMemberS{Value: m.ID}},
			}}},
		}, nil
	}), nil
}

// Template returns the block: a notes table and the consumer's grant to put in it.
func (Example) Template() []byte { return block }
