// Package shipments is the test type of internal/adapt: what a new user writes from a copy
// of payouts, in a shape none of the shipped examples has. It is kept as testdata (the go
// tool ignores it here) and copied to functions/consumer/shipments in the test's copy of
// the repository, where wiring.go lists it alone. It repeats parts of payouts on purpose
// (duplicates pairs them): it is what docs/adapting.md has a user write from a copy of
// payouts, outside the shipped examples, so that the test proves that route; sharing code
// with payouts would tie it to an example a user may delete.
//
// For each shipment {"shipment_id", "order_id", "parcels"} the handler:
//
//  1. decodes it strictly; an invalid message is idem.Permanent, dead-lettered;
//  2. reads the shipment's journal entry (idem.Attempt.Applied): present, it answers
//     without calling anything (idem.Result.Guarded);
//  3. reads the order's row: an order not packed is refused (idem.Refuse) before any call;
//  4. books the parcels with the carrier (CARRIER_URL + "/bookings") in the step "book",
//     then asks the warehouse to release them (WAREHOUSE_URL + "/releases") in the step
//     "release": two outside services, each with the idempotency key forwarded;
//  5. returns the journal entry (the guard), the order's totals, a "shipment booked"
//     notice on a FIFO queue (SHIPMENT_NOTICES_QUEUE_URL, the one the tools count) and a
//     tracking event on a standard queue (TRACKING_QUEUE_URL), where a resend arrives
//     and the receiver dedupes on the idempotency-key attribute.
package shipments
