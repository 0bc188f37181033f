// Package audit defines TaskFlow's audit events: the request context every event
// carries, field snapshots and diffs governed by per-field rules, and the canonical
// encoding that the per-chain hash covers. The store writes events with it inside
// the transaction of each change.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Info is the request context recorded with every event.
type Info struct {
	IP        string
	UserAgent string
	RequestID string
}

type infoKey struct{}

// WithInfo returns ctx carrying the request's audit context.
func WithInfo(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// InfoFrom returns the request's audit context, or the zero Info.
func InfoFrom(ctx context.Context) Info {
	info, _ := ctx.Value(infoKey{}).(Info)
	return info
}

// Event is an audit event as a domain operation describes it; the store adds the
// request context, time, id and hashes when it appends it.
type Event struct {
	// WorkspaceID is the workspace of the change, or nil for account events.
	WorkspaceID *string
	// ActorID is the user who acted, or nil (a failed login of an unknown e-mail).
	ActorID *string
	// Action is one of the contract's actions, such as "task.created".
	Action string
	// EntityID is the id of the changed thing ("" when there is none).
	EntityID string
	// Metadata holds a snapshot (create, delete) or {"changes": diff} (update).
	Metadata map[string]any
}

// EntityType returns the word before the dot of the action.
func (e Event) EntityType() string {
	t, _, _ := strings.Cut(e.Action, ".")
	return t
}

// ChainKey returns the hash chain the event belongs to: its workspace, else the
// account of its entity or actor, else "anonymous".
func (e Event) ChainKey() string {
	switch {
	case e.WorkspaceID != nil:
		return *e.WorkspaceID
	case e.EntityType() == "user" && e.EntityID != "":
		return "user:" + e.EntityID
	case e.ActorID != nil:
		return "user:" + *e.ActorID
	}
	return "anonymous"
}

// Field rules, given in each domain struct field's `audit` tag. Every exported
// field must have one, so a new column can't leak a secret unnoticed.
const (
	RuleTrack  = "track"  // recorded in snapshots and diffs
	RuleIgnore = "ignore" // bookkeeping (timestamps): never recorded
	RuleSecret = "secret" // never recorded; a change is noted as "[changed]" without values
)

// field is one audited field of a struct type.
type field struct {
	index int
	name  string // the JSON name
	rule  string
}

// fieldsOf returns the audited fields of struct type t, or an error naming a
// field without a valid rule.
func fieldsOf(t reflect.Type) ([]field, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("audit: %s is not a struct", t)
	}
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		rule := f.Tag.Get("audit")
		if rule != RuleTrack && rule != RuleIgnore && rule != RuleSecret {
			return nil, fmt.Errorf("audit: field %s.%s has no audit rule (track, ignore or secret)", t.Name(), f.Name)
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = strings.ToLower(f.Name[:1]) + f.Name[1:]
		}
		out = append(out, field{index: i, name: name, rule: rule})
	}
	return out, nil
}

// Check returns an error if a field of v's struct type has no audit rule. Tests
// call it for every domain type.
func Check(v any) error {
	_, err := fieldsOf(reflect.TypeOf(v))
	return err
}

// value returns the plain value of a field for the log: nil for a nil pointer,
// the pointed-to value otherwise, times in UTC RFC 3339.
func value(v reflect.Value) any {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if t, ok := v.Interface().(time.Time); ok {
		return t.UTC().Format(time.RFC3339Nano)
	}
	if v.Kind() == reflect.String {
		return v.String()
	}
	return v.Interface()
}

// Snapshot returns the tracked fields of the struct v (or *v) by JSON name. It
// panics if a field has no rule: that is a programming error caught by tests.
func Snapshot(v any) map[string]any {
	fields, err := fieldsOf(reflect.TypeOf(v))
	if err != nil {
		panic(err)
	}
	rv := reflect.Indirect(reflect.ValueOf(v))
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		if f.rule == RuleTrack {
			out[f.name] = value(rv.Field(f.index))
		}
	}
	return out
}

// Change is one field's old and new value.
type Change struct {
	From any `json:"from"`
	To   any `json:"to"`
}

// Changes compares two values of the same struct type and returns
// {field: {from, to}} for every tracked field that differs; a secret field that
// differs is recorded as {from: "[redacted]", to: "[redacted]"}. It panics if a
// field has no rule or the types differ.
func Changes(before, after any) map[string]any {
	tb, ta := reflect.TypeOf(before), reflect.TypeOf(after)
	if tb != ta {
		panic(fmt.Sprintf("audit: Changes(%s, %s)", tb, ta))
	}
	fields, err := fieldsOf(tb)
	if err != nil {
		panic(err)
	}
	vb, va := reflect.Indirect(reflect.ValueOf(before)), reflect.Indirect(reflect.ValueOf(after))
	out := map[string]any{}
	for _, f := range fields {
		if f.rule == RuleIgnore {
			continue
		}
		from, to := value(vb.Field(f.index)), value(va.Field(f.index))
		if reflect.DeepEqual(from, to) {
			continue
		}
		if f.rule == RuleSecret {
			out[f.name] = Change{From: "[redacted]", To: "[redacted]"}
			continue
		}
		out[f.name] = Change{From: from, To: to}
	}
	return out
}

// Record is an event as stored: the canonical encoding of everything but its own
// hash is what the hash chain covers.
type Record struct {
	ID          string         `json:"id"`
	ChainKey    string         `json:"chainKey"`
	WorkspaceID *string        `json:"workspaceId"`
	ActorID     *string        `json:"actorId"`
	Action      string         `json:"action"`
	EntityType  string         `json:"entityType"`
	EntityID    string         `json:"entityId"`
	OccurredAt  time.Time      `json:"occurredAt"`
	IP          *string        `json:"ip"`
	UserAgent   *string        `json:"userAgent"`
	RequestID   *string        `json:"requestId"`
	Metadata    map[string]any `json:"metadata"`
}

// NormalizeMetadata round-trips metadata through JSON (numbers kept as written),
// so that it hashes the same before it is stored and after it is read back.
func NormalizeMetadata(m map[string]any) (map[string]any, error) {
	if m == nil {
		return map[string]any{}, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return DecodeMetadata(b)
}

// DecodeMetadata decodes stored metadata, keeping numbers as json.Number.
func DecodeMetadata(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	out := map[string]any{}
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("audit: decode metadata: %w", err)
	}
	return out, nil
}

// Hash returns SHA-256(prev || canonical(r)). The canonical form is r's JSON with
// the time in UTC at microsecond precision (what Postgres keeps) and map keys sorted.
func Hash(prev []byte, r Record) ([]byte, error) {
	r.OccurredAt = r.OccurredAt.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit: encode: %w", err)
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(b)
	return h.Sum(nil), nil
}
