package mgmt

import (
	"context"
	"errors"
	"fmt"
)

// Kind classifies an Error so each transport can pick its status.
type Kind int

const (
	// Invalid: the caller's input is wrong (REST 400). Field names it.
	Invalid Kind = iota + 1
	// NotFound: the record named does not exist (404).
	NotFound
	// Conflict: the request clashes with the state: a duplicate name, a
	// record in use, a locked pod, no free GPU (409).
	Conflict
	// Unavailable: this host cannot do it now: no container runtime, a
	// runtime failure (503).
	Unavailable
	// Unsupported: one host can never do it (e.g. encrypted volumes). v1
	// answers 400, as it always did.
	Unsupported
	// Forbidden: the API key's permissions do not allow it (403). Msg
	// names the key and what it lacks.
	Forbidden
)

func (k Kind) String() string {
	switch k {
	case Invalid:
		return "invalid"
	case NotFound:
		return "not found"
	case Conflict:
		return "conflict"
	case Unavailable:
		return "unavailable"
	case Unsupported:
		return "unsupported"
	case Forbidden:
		return "forbidden"
	}
	return "unknown"
}

// Reason refines a Kind where RunPod's documents give the case a status
// of its own on one surface (REST v2: a missing reference is 404, a
// serverless template for a pod 422, a record in use 400).
type Reason int

const (
	_ Reason = iota
	// Missing: an Invalid input names a record that does not exist.
	Missing
	// WrongKind: an Invalid input names a record of the wrong kind (a
	// serverless template for a pod).
	WrongKind
	// InUse: a Conflict: the record to delete is in use.
	InUse
)

// Error is a management rule's refusal. Anything else a Service returns is
// an internal failure (REST 500). Find it with errors.As or KindOf.
type Error struct {
	Kind   Kind
	Reason Reason // 0 when the Kind says it all
	Field  string // the input field at fault ("gpuTypeIds"), "" when none
	Msg    string // a whole sentence for the client, naming the field
	Err    error  // the cause, for errors.Is (e.g. a runtime error)
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns err's Kind, or 0 for an internal error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

func newErr(k Kind, field, format string, a ...any) *Error {
	return &Error{Kind: k, Field: field, Msg: ClipMessage(fmt.Sprintf(format, a...))}
}

// invalid is a bad-input error about field.
func invalid(field, format string, a ...any) error { return newErr(Invalid, field, format, a...) }

func notFound(format string, a ...any) error { return newErr(NotFound, "", format, a...) }

// missing is an Invalid input naming a record that does not exist.
func missing(field, id string) error {
	e := newErr(Invalid, field, "%s %s does not exist", field, quote(ShortID(id)))
	e.Reason = Missing
	return e
}

// inUse is a Conflict: the record to delete is in use.
func inUse(format string, a ...any) error {
	e := newErr(Conflict, "", format, a...)
	e.Reason = InUse
	return e
}

// notFoundID is "<what> <id> not found", a long id shortened (ShortID).
func notFoundID(what, id string) error { return notFound("%s %s not found", what, ShortID(id)) }

func conflict(format string, a ...any) error { return newErr(Conflict, "", format, a...) }

// InvalidInput returns an Invalid error about field; adapters use it for
// their own decoding failures so one error mapper serves both.
func InvalidInput(field, format string, a ...any) error { return invalid(field, format, a...) }

// live refuses the work of a request that has ended — its client left, its
// deadline passed, or the server is stopping — before anything is read or
// written for it.
func live(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return &Error{Kind: Unavailable, Msg: "the request ended before it was done: " + context.Cause(ctx).Error(), Err: context.Cause(ctx)}
}
