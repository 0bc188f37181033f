package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"taskflow/audit"
	"taskflow/errs"
)

// projectColumns is the column list scanned by scanProject.
const projectColumns = `p.id, p.workspace_id, p.name, p.description, p.archived_at, p.created_at, p.updated_at`

// scanProject scans the columns of projectColumns.
func scanProject(row pgx.Row, extra ...any) (*Project, error) {
	var p Project
	dest := append([]any{&p.ID, &p.WorkspaceID, &p.Name, &p.Description, &p.ArchivedAt, &p.CreatedAt, &p.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	return &p, nil
}

// ProjectsByIDs returns the projects with these ids (archived ones included) that
// live in a workspace viewerID is a member of, by id. Other ids are absent.
func (db *DB) ProjectsByIDs(ctx context.Context, viewerID string, ids []string) (map[string]*Project, error) {
	out := make(map[string]*Project, len(ids))
	cond, arg, n := anyID("p.id", 2, ids)
	if n == 0 || !validID(viewerID) {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, projectsByIDsSQL(cond), viewerID, arg)
	if err != nil {
		return nil, fmt.Errorf("projects by ids: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanProject(rows)
		if err != nil {
			return nil, fmt.Errorf("projects by ids: %w", err)
		}
		out[p.ID] = p
	}
	return out, rows.Err()
}

// projectsByIDsSQL is ProjectsByIDs' statement, with the viewer's id as $1
// and cond choosing the projects by id ($2).
func projectsByIDsSQL(cond string) string {
	return `SELECT ` + projectColumns + ` FROM projects p
		JOIN members v ON v.workspace_id = p.workspace_id AND v.user_id = $1
		WHERE ` + cond
}

// ProjectsScope is the cursor scope of a workspace's project list with or without
// its archived projects: a cursor of one such list is refused by any other.
func ProjectsScope(workspaceID string, includeArchived bool) string {
	return "projects:" + workspaceID + ":" + strconv.FormatBool(includeArchived)
}

// Projects returns a page of the workspace's projects, newest first, without the
// archived ones unless includeArchived. p must come from NewPage with
// ProjectsScope(workspaceID, includeArchived). It returns UNAUTHENTICATED for no
// viewer and NOT_FOUND if the viewer is not a member of the workspace.
func (db *DB) Projects(ctx context.Context, viewer *User, workspaceID string, includeArchived bool, p Page) (*ProjectConnection, error) {
	if viewer == nil {
		return nil, errs.ErrUnauthenticated
	}
	pages, err := db.ProjectLists(ctx, viewer.ID, []ProjectList{{WorkspaceID: workspaceID, IncludeArchived: includeArchived, Page: p}})
	if err != nil {
		return nil, err
	}
	if pages[0] == nil {
		return nil, notFound("workspace")
	}
	return pages[0], nil
}

// cleanDescription returns d, or nil when it is nil or only white space. It returns a
// BAD_USER_INPUT error if it is longer than MaxDescriptionLength characters.
func cleanDescription(d *string) (*string, error) {
	if d == nil {
		return nil, nil
	}
	s := *d
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if utf8.RuneCountInString(s) > MaxDescriptionLength {
		return nil, errs.Errorf(errs.CodeBadUserInput, "description must be at most %d characters", MaxDescriptionLength)
	}
	return &s, nil
}

// CreateProject creates a project in the workspace and records project.created.
// The actor must be at least a MEMBER. It returns UNAUTHENTICATED for no actor,
// NOT_FOUND if the actor is not a member of the workspace, FORBIDDEN for a VIEWER,
// and BAD_USER_INPUT for an empty or over-long name or description, or a name
// holding a character a name may not (cleanName).
func (db *DB) CreateProject(ctx context.Context, actor *User, workspaceID, name string, description *string) (*Project, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	name, err := cleanName("name", name, MaxNameLength)
	if err != nil {
		return nil, err
	}
	desc, err := cleanDescription(description)
	if err != nil {
		return nil, err
	}
	var out *Project
	err = db.WithTx(ctx, func(ctx context.Context, tx Querier) error {
		ws, err := db.workspaceOf(ctx, tx, parentWorkspace, workspaceID)
		if err != nil {
			return err
		}
		now := stamp(time.Now())
		p := &Project{ID: newID(), WorkspaceID: ws, Name: name, Description: desc, CreatedAt: now, UpdatedAt: now}
		u := unitOfWorkFrom(ctx)
		u.checkParent(parentWorkspace, ws, actor, RoleMember, "create projects", "", nil)
		u.write("insert project", `INSERT INTO projects (id, workspace_id, name, description, created_at, updated_at)
			SELECT $1, $2, $3, $4, $5, $6 WHERE taskflow_ok()`,
			[]any{p.ID, p.WorkspaceID, p.Name, p.Description, p.CreatedAt, p.UpdatedAt}, 1)
		out = p
		return db.appendAudit(ctx, tx, audit.Event{WorkspaceID: &ws, ActorID: &actor.ID,
			Action: "project.created", EntityID: p.ID, Metadata: audit.Snapshot(p)})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// projectsTable is the projects table for the write helpers: an update takes
// FOR NO KEY UPDATE, so tasks can still be added while a project is renamed
// (their foreign key needs KEY SHARE).
var projectsTable = table[Project]{kind: "project", name: "projects", alias: "p", columns: projectColumns,
	lock: "FOR NO KEY UPDATE", scan: scanProject, event: func(p *Project) (string, string) { return p.WorkspaceID, p.ID },
	withID: func(id string) *Project { return &Project{ID: id} }, json: `jsonb_build_object('id', d.id,
		'workspaceId', d.workspace_id, 'name', d.name, 'description', d.description,
		'archivedAt', ` + rfc3339SQL("d.archived_at") + `) || ` + timesSQL}

// ProjectPatch is a change to a project: nil fields stay as they are.
type ProjectPatch struct {
	// Name is the new name; it cannot be cleared.
	Name *string
	// Description is the new description when SetDescription; nil clears it.
	Description    *string
	SetDescription bool
}

// UpdateProject applies patch to a project (archived ones included) and records
// project.updated with metadata.changes. A patch that changes nothing records
// nothing and leaves updatedAt as it was. The actor must be at least a MEMBER. It
// returns UNAUTHENTICATED for no actor, NOT_FOUND if the project does not exist
// or is in a workspace the actor is not a member of, FORBIDDEN for a VIEWER, and
// BAD_USER_INPUT for an empty or over-long name, a new name holding a character
// a name may not (cleanName; the project's name unchanged is taken, a name
// stored before that rule included, checked after NOT_FOUND and FORBIDDEN) or
// an over-long description.
func (db *DB) UpdateProject(ctx context.Context, actor *User, id string, patch ProjectPatch) (*Project, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	var sets []assign
	var refuse string
	var more refusals
	var args []any
	if patch.Name != nil {
		name, err := trimName("name", *patch.Name, MaxNameLength)
		if err != nil {
			return nil, err
		}
		if err := hiddenInName("name", name); err != nil {
			// A name stored before the rule may be sent back as it is (by a
			// form that sends every field): only a new name is refused.
			refuse, more, args = `CASE WHEN r.name IS DISTINCT FROM $4 THEN 'hidden_name' END`,
				refusals{"hidden_name": err}, []any{name}
		}
		sets = append(sets, setTo("name", "name", "text", name))
	}
	if patch.SetDescription {
		desc, err := cleanDescription(patch.Description)
		if err != nil {
			return nil, err
		}
		sets = append(sets, setTo("description", "description", "text", desc))
	}
	return updateRecorded(ctx, db, projectsTable, actor, id, RoleMember, "edit projects", "project.updated", sets, refuse, more, args...)
}

// ArchiveProject archives a project and records project.archived with
// metadata.changes.archivedAt. Archiving an archived project returns it unchanged
// and records nothing. The actor must be an OWNER or ADMIN. It returns
// UNAUTHENTICATED for no actor, NOT_FOUND if the project does not exist or is in
// a workspace the actor is not a member of, and FORBIDDEN for a weaker role.
func (db *DB) ArchiveProject(ctx context.Context, actor *User, id string) (*Project, error) {
	if actor == nil {
		return nil, errs.ErrUnauthenticated
	}
	// The time of the change ($2), unless archived already.
	archive := assign{column: "archived_at", field: "archivedAt", value: "COALESCE(b.archived_at, $2)", time: true}
	return updateRecorded(ctx, db, projectsTable, actor, id, RoleAdmin, "archive projects", "project.archived",
		[]assign{archive}, "", nil)
}

// ProjectList asks for one page of a workspace's projects (see Projects).
type ProjectList struct {
	WorkspaceID     string
	IncludeArchived bool
	// Page must come from NewPage with ProjectsScope(WorkspaceID, IncludeArchived).
	Page Page
}

// endOfTime and lastID bound a keyset position that every row precedes: the
// position of a page with no cursor.
var (
	endOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	lastID    = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

// ProjectLists returns the pages of several project lists in one query, in the
// order of lists. A list whose workspace viewerID is not a member of (or that
// does not exist) gets a nil page.
func (db *DB) ProjectLists(ctx context.Context, viewerID string, lists []ProjectList) ([]*ProjectConnection, error) {
	out := make([]*ProjectConnection, len(lists))
	if len(lists) == 0 || !validID(viewerID) {
		return out, nil
	}
	var (
		idx   []int32
		ws    []string
		incl  []bool
		limit []int32
		at    []time.Time
		after []string
	)
	for i, l := range lists {
		if !validID(l.WorkspaceID) {
			continue
		}
		idx = append(idx, int32(i))
		ws = append(ws, l.WorkspaceID)
		incl = append(incl, l.IncludeArchived)
		limit = append(limit, int32(l.Page.First+1))
		if c := l.Page.After; c != nil {
			at, after = append(at, c.At), append(after, c.ID)
		} else {
			at, after = append(at, endOfTime), append(after, lastID)
		}
	}
	if len(idx) == 0 {
		return out, nil
	}
	rows, err := db.q(ctx).Query(ctx, `SELECT k.i, p.id, p.workspace_id, p.name, p.description, p.archived_at, p.created_at, p.updated_at
		FROM unnest($2::int[], $3::text[]::uuid[], $4::bool[], $5::int[], $6::timestamptz[], $7::text[]::uuid[]) AS k(i, ws, incl, lim, at, cid)
		JOIN members v ON v.workspace_id = k.ws AND v.user_id = $1
		LEFT JOIN LATERAL (SELECT `+projectColumns+` FROM projects p
			WHERE p.workspace_id = k.ws AND (k.incl OR p.archived_at IS NULL) AND (p.created_at, p.id) < (k.at, k.cid)
			ORDER BY p.created_at DESC, p.id DESC LIMIT k.lim) p ON true
		ORDER BY k.i, p.created_at DESC, p.id DESC`, viewerID, idx, ws, incl, limit, at, after)
	if err != nil {
		return nil, fmt.Errorf("project lists: %w", err)
	}
	defer rows.Close()
	items := make(map[int][]*Project, len(idx))
	for rows.Next() {
		var i int32
		var id, wsID, name *string
		var createdAt, updatedAt *time.Time
		var p Project
		if err := rows.Scan(&i, &id, &wsID, &name, &p.Description, &p.ArchivedAt, &createdAt, &updatedAt); err != nil {
			return nil, fmt.Errorf("project lists: %w", err)
		}
		if _, ok := items[int(i)]; !ok {
			items[int(i)] = []*Project{} // the viewer is a member: the list exists
		}
		if id == nil {
			continue // a member's empty list
		}
		p.ID, p.WorkspaceID, p.Name, p.CreatedAt, p.UpdatedAt = *id, *wsID, *name, *createdAt, *updatedAt
		items[int(i)] = append(items[int(i)], &p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("project lists: %w", err)
	}
	for i, page := range items {
		l := lists[i]
		out[i] = connection(page, l.Page, ProjectsScope(l.WorkspaceID, l.IncludeArchived), func(pr *Project) (time.Time, string) {
			return pr.CreatedAt, pr.ID
		})
	}
	return out, nil
}
