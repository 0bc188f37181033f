package resolvers_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"taskflow/httpapi/apitest"
)

// maxInvitationStatements bounds the statements of the query below, whatever
// the number of workspaces: token, the viewer's workspaces, their members,
// the invitation pages (the workspaces', the viewer's own at two page sizes),
// the users (members and inviters): 8 or 9, with room for loader batches split
// by scheduling. A loader gathers keys for a millisecond; under the race
// detector on a loaded machine its keys can straddle that window, and a
// fresh-clone CI run on 2026-12-03 saw 13 (the users, the members and the
// invitation pages each split in two). Unbatched, 12 workspaces would take
// over 24, so 15 still fails an N+1 with room to spare.
const maxInvitationStatements = 15

// The open invitations of each of a user's workspaces with their inviters, the
// user's own invitations with theirs, and every member's invitations (the
// user's own, empty for the others) cost a small constant number of
// statements: the same bound for 3 workspaces as for 12.
func TestInvitationHopsAreBatched(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	inviters := []apitest.User{env.NewUser(t, "I1"), env.NewUser(t, "I2"), env.NewUser(t, "I3")}
	counts := map[int]int{}
	for _, n := range []int{3, 12} {
		viewer := env.NewUser(t, "Viewer")
		member := env.NewUser(t, "Member")
		// n workspaces of the viewer (OWNER) with a member and 5 open
		// invitations each, and n other workspaces that invite the viewer.
		_, err := env.DB.Pool.Exec(t.Context(), `WITH ws AS (
				INSERT INTO workspaces (name) SELECT 'ws ' || g FROM generate_series(1, $1::int * 2) g RETURNING id, name),
			mine AS (SELECT id FROM ws WHERE split_part(name, ' ', 2)::int <= $1),
			theirs AS (SELECT id FROM ws WHERE split_part(name, ' ', 2)::int > $1),
			m AS (INSERT INTO members (workspace_id, user_id, role)
				SELECT id, $2::uuid, 'OWNER' FROM mine UNION ALL SELECT id, $3::uuid, 'MEMBER' FROM mine),
			i AS (INSERT INTO invitations (workspace_id, email, role, invited_by, expires_at)
				SELECT mine.id, 'guest-' || g || '@example.com', 'VIEWER', ($5::uuid[])[1 + g % 3], now() + interval '1 day'
				FROM mine, generate_series(1, 5) g)
			INSERT INTO invitations (workspace_id, email, role, invited_by, expires_at)
			SELECT id, $4, 'MEMBER', ($5::uuid[])[1 + abs(hashtext(id::text)) % 3], now() + interval '1 day' FROM theirs`,
			n, viewer.ID, member.ID, viewer.Email, []string{inviters[0].ID, inviters[1].ID, inviters[2].ID})
		if err != nil {
			t.Fatal(err)
		}

		counter.reset()
		r := post(t, env, viewer.Token, `{ me {
			invitations(first: 50) { nodes { id workspaceName invitedBy { id name } } }
			workspaces { id
				invitations(first: 20) { nodes { id email invitedBy { id name } } }
				members { user { id invitations { nodes { id } } } } } } }`, nil)
		stmts := counter.statements()
		var out struct {
			Me struct {
				Invitations struct {
					Nodes []struct {
						ID, WorkspaceName string
						InvitedBy         struct{ ID, Name string }
					}
				}
				Workspaces []struct {
					Invitations struct {
						Nodes []struct {
							ID        string
							InvitedBy struct{ ID, Name string }
						}
					}
					Members []struct {
						User struct {
							ID          string
							Invitations struct{ Nodes []struct{ ID string } }
						}
					}
				}
			}
		}
		mustData(t, r, nil)
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Me.Invitations.Nodes) != n || len(out.Me.Workspaces) != n {
			t.Fatalf("%d own invitations, %d workspaces, want %d", len(out.Me.Invitations.Nodes), len(out.Me.Workspaces), n)
		}
		for _, inv := range out.Me.Invitations.Nodes {
			if inv.InvitedBy.Name == "" || inv.WorkspaceName == "" {
				t.Fatalf("own invitation = %+v", inv)
			}
		}
		for _, w := range out.Me.Workspaces {
			if len(w.Invitations.Nodes) != 5 || len(w.Members) != 2 {
				t.Fatalf("workspace = %+v", w)
			}
			for _, inv := range w.Invitations.Nodes {
				if inv.InvitedBy.Name == "" {
					t.Fatalf("invitation = %+v", inv)
				}
			}
			for _, m := range w.Members {
				want := 0
				if m.User.ID == viewer.ID {
					want = n
				}
				if len(m.User.Invitations.Nodes) != want {
					t.Fatalf("%s's invitations as the viewer sees them: %d, want %d", m.User.ID, len(m.User.Invitations.Nodes), want)
				}
			}
		}
		counts[n] = len(stmts)
		checkStatements(t, fmt.Sprintf("%d workspaces", n), stmts, maxInvitationStatements)
	}
	t.Logf("statements: %v", fmt.Sprint(counts))
}
