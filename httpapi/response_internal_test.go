package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// writeResponse writes what encoding/json would, data copied as it is: with
// and without errors, other extensions and extensions.cost.
func TestWriteResponse(t *testing.T) {
	t.Parallel()
	cost := &costStatus{RequestedQueryCost: 3, ThrottleStatus: throttleStatus{MaximumAvailable: 10, CurrentlyAvailable: 7}}
	data := json.RawMessage(`{"task":{"title":"a < b & \"c\"","n":[1,2]}}`)
	for _, c := range []struct {
		name string
		resp graphql.Response
		cost *costStatus
		want map[string]any
	}{
		{"data", graphql.Response{Data: data}, nil, map[string]any{"data": map[string]any{
			"task": map[string]any{"title": `a < b & "c"`, "n": []any{1.0, 2.0}}}}},
		{"no data", graphql.Response{}, nil, map[string]any{"data": nil}},
		{"errors and cost", graphql.Response{Data: json.RawMessage(`{"task":null}`),
			Errors: gqlerror.List{{Message: "<not found>", Extensions: map[string]any{"code": "NOT_FOUND"}}}}, cost,
			map[string]any{
				"errors":     []any{map[string]any{"message": "<not found>", "extensions": map[string]any{"code": "NOT_FOUND"}}},
				"data":       map[string]any{"task": nil},
				"extensions": map[string]any{"cost": map[string]any{"requestedQueryCost": 3.0, "throttleStatus": map[string]any{"maximumAvailable": 10.0, "currentlyAvailable": 7.0, "restoreRate": 0.0}}},
			}},
		{"other extensions", graphql.Response{Data: json.RawMessage(`{}`), Extensions: map[string]any{"idempotency": []int{1}}}, nil,
			map[string]any{"data": map[string]any{}, "extensions": map[string]any{"idempotency": []any{1.0}}}},
	} {
		rec := httptest.NewRecorder()
		writeResponse(rec, &c.resp, c.cost)
		var got map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v in %s", c.name, err, rec.Body)
		}
		if rec.Code != 200 || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %d %s\nwant %v", c.name, rec.Code, rec.Body, c.want)
		}
	}
}
