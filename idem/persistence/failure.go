package persistence

// Category is what kind of failure a record's error is, for whoever sent the message:
// the ingress reports it to HTTP callers instead of the error, whose text may name
// accounts, roles, tables and other callers' data. The raw error stays in the record and
// in the logs.
type Category string

// The categories, from CategoryOf.
const (
	// CategoryRetrying: a redelivery retries it (a crash, a throttled or failed call, a
	// lost lease).
	CategoryRetrying Category = "retrying"
	// CategoryRefused: a business rule refused it (ErrRefused); redriven after the state
	// it read changed, it runs again.
	CategoryRefused Category = "refused"
	// CategoryInvalid: the message cannot pass as it is (invalid input, its key used with
	// another body, a key of the HTTP callers' namespace it may not use, a request the
	// store refused as invalid).
	CategoryInvalid Category = "invalid"
)

// Failure is what a failed attempt records: the error's text, whether the next delivery
// may take the key over, and what its sender may be told of it (Category, Public).
type Failure struct {
	Reason    string
	Retryable bool
	Category  Category
	Public    string
	// RefusedBy is the delivery a business rule's refusal came in (Record.RefusedBy);
	// zero for other failures, and outside an SQS batch.
	RefusedBy Delivery
}
