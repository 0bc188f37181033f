package resolvers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"taskflow/graph"
	"taskflow/httpapi"
	"taskflow/httpapi/apitest"
	"taskflow/resolvers"
	"taskflow/store"
)

// zeroTimeMe is the resolver root whose me has the zero time as createdAt,
// which gqlgen's Time marshals as null.
type zeroTimeMe struct{ *resolvers.Resolver }

func (z zeroTimeMe) Query() graph.QueryResolver { return zeroTimeQuery{z.Resolver.Query()} }

type zeroTimeQuery struct{ graph.QueryResolver }

func (q zeroTimeQuery) Me(ctx context.Context) (*store.User, error) {
	u, err := q.QueryResolver.Me(ctx)
	if u != nil {
		c := *u
		c.CreatedAt = time.Time{}
		u = &c
	}
	return u, err
}

// A leaf field marshaled at once (inorder/gen, rewriteLeaves) answers as
// gqlgen's way: its value, and for a non-null scalar whose value marshals to
// null (a zero time), gqlgen's error at the field's own path with the null
// propagated to the nullable parent.
func TestLeafFieldsAnswerAsGqlgen(t *testing.T) {
	t.Parallel()
	env := apitest.New(t, func(o *httpapi.Options) {
		o.Resolvers = zeroTimeMe{&resolvers.Resolver{DB: o.DB, AuditKeys: o.AuditKeys, Live: o.Live}}
	})
	alice := env.SignUp(t, "alice")
	r := env.Post(t, alice.Token, `{ me { id name email } }`, nil)
	var got struct {
		Me struct{ ID, Name, Email string }
	}
	if err := json.Unmarshal(r.Body.Data, &got); err != nil || r.Code() != "" || got.Me.ID != alice.ID || got.Me.Name != "alice" {
		t.Fatalf("%s", r.Raw)
	}
	r = env.Post(t, alice.Token, `{ me { id createdAt } }`, nil)
	if string(r.Body.Data) != `{"me":null}` || len(r.Body.Errors) != 1 {
		t.Fatalf("%s", r.Raw)
	}
	if path, _ := json.Marshal(r.Body.Errors[0]["path"]); string(path) != `["me","createdAt"]` {
		t.Errorf("path %s: %s", path, r.Raw)
	}
}
