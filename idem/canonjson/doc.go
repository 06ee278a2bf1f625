// Package canonjson turns a JSON document into the one encoding its value has, for the
// payload's fingerprint (idem.HashPayload). It promises that two documents with one
// canonical form are the same value to every decoder: it refuses what decoders read
// differently (ErrAmbiguousJSON) and what is too large or deep to decode safely
// (ErrJSONTooLarge), before it decodes.
package canonjson
