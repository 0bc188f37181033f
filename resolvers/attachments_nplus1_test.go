package resolvers_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// maxAttachmentStatements bounds the statements of the page query below,
// whatever the number of tasks: token, task, project, task page, attachment
// pages, users, with room for a loader batch split in two by scheduling.
const maxAttachmentStatements = 10

// A page of tasks with 5 attachments each, with their uploaders, tasks and
// download links, costs a small constant number of statements: the same bound
// for 10 tasks as for 100 (500 attachments).
func TestAttachmentPageStatementsDoNotGrow(t *testing.T) {
	t.Parallel()
	env, counter := countedEnv(t)
	w := newWorld(t, env)
	counts := map[int]int{}
	for _, n := range []int{10, 100} {
		project := newProject(t, env, w.workspace, "P")
		_, err := env.DB.Pool.Exec(t.Context(), `INSERT INTO tasks (project_id, workspace_id, title, created_by)
			SELECT $1, $2, 'task ' || g, $3 FROM generate_series(1, $4::int) g`, project, w.workspace, w.owner.ID, n)
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.DB.Pool.Exec(t.Context(), `INSERT INTO attachment_blobs (workspace_id, sha256, key, size, content_type)
			SELECT $1, lpad(to_hex(g), 64, '0'), gen_random_uuid()::text, g, 'text/plain' FROM generate_series(1, 5) g
			ON CONFLICT DO NOTHING`, w.workspace)
		if err != nil {
			t.Fatal(err)
		}
		_, err = env.DB.Pool.Exec(t.Context(), `INSERT INTO attachments (task_id, workspace_id, sha256, filename, content_type, size, uploader_id)
			SELECT t.id, t.workspace_id, lpad(to_hex(g), 64, '0'), 'file ' || g, 'text/plain', g,
				(ARRAY[$2, $3, $4]::uuid[])[1 + g % 3]
			FROM tasks t, generate_series(1, 5) g WHERE t.project_id = $1`,
			project, w.member.ID, w.admin.ID, w.owner.ID)
		if err != nil {
			t.Fatal(err)
		}
		anchor := anyTask(t, env, project)

		counter.reset()
		var out struct {
			Task struct {
				Project struct {
					Tasks struct {
						Nodes []struct {
							ID          string
							Attachments struct {
								Nodes []struct {
									ID, Filename, DownloadURL string
									Uploader                  struct{ ID, Name string }
									Task                      struct{ ID string }
								}
							}
						}
					}
				}
			}
		}
		r := call(t, env, w.viewer, `query($id: ID!, $n: Int!) { task(id: $id) { project { tasks(first: $n) { nodes {
			id attachments(first: 10) { nodes { id filename downloadUrl uploader { id name } task { id } } } } } } } }`,
			map[string]any{"id": anchor, "n": n})
		stmts := counter.statements()
		if len(r.Body.Errors) > 0 {
			t.Fatalf("errors: %s", r.Raw)
		}
		if err := json.Unmarshal(r.Body.Data, &out); err != nil {
			t.Fatal(err)
		}
		nodes := out.Task.Project.Tasks.Nodes
		if len(nodes) != n {
			t.Fatalf("%d tasks, want %d", len(nodes), n)
		}
		for _, task := range nodes {
			if len(task.Attachments.Nodes) != 5 {
				t.Fatalf("task = %+v", task)
			}
			for _, a := range task.Attachments.Nodes {
				if a.Uploader.Name == "" || a.Task.ID != task.ID || !strings.HasPrefix(a.DownloadURL, "/attachments/"+a.ID+"?") {
					t.Fatalf("attachment = %+v", a)
				}
			}
		}
		counts[n] = len(stmts)
		checkStatements(t, fmt.Sprintf("%d tasks", n), stmts, maxAttachmentStatements)
	}
	t.Logf("statements: %v", counts)
}
