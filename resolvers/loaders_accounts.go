package resolvers

import (
	"context"
	"sync/atomic"
	"time"

	"taskflow/auth"
	"taskflow/errs"
	"taskflow/store"
)

// loaderWait is the longest a loader gathers keys before it fetches a batch
// (see loader): the elements of one list that all ask do not wait for it, and
// a field outside any list does not wait at all. The page loaders, whose keys
// come from many more goroutines, wait longer (pageLoaderWait).
const loaderWait = time.Millisecond

// loaderMaxBatch is the most keys one batch fetches (a longer list goes
// through dataloadgen's batches of this size).
const loaderMaxBatch = 500

// accountLoaders batch the reads of users, workspaces, members and projects. The
// workspace, member and project loaders only return things in workspaces the
// request's viewer (see Viewer) is a member of.
type accountLoaders struct {
	// signedIn is the user that register or login signed in during this request:
	// the payload of those mutations is read as that user.
	signedIn atomic.Pointer[store.User]

	users        loader[string, *store.User]
	workspaces   loader[string, *store.Workspace]
	members      loader[string, []*store.Member]
	projects     loader[string, *store.Project]
	workspacesOf loader[string, []*store.Workspace]
	projectLists loader[projectListKey, *store.ProjectConnection]
	// memberLists and workspaceLists load pages of workspaces' members and
	// of users' workspaces, batched like projectLists.
	memberLists    loader[memberListKey, *store.MemberConnection]
	workspaceLists loader[workspaceListKey, *store.WorkspaceConnection]
	// invitations loads pages of workspaces' open invitations and of the
	// viewer's own, batched like projectLists.
	invitations loader[store.InvitationPageKey, *store.InvitationConnection]
}

// projectListKey names one page of a workspace's projects.
type projectListKey struct {
	WorkspaceID     string
	IncludeArchived bool
	First           int
	After           string
}

// memberListKey names one page of a workspace's members.
type memberListKey struct {
	WorkspaceID string
	First       int
	After       string
}

// workspaceListKey names one page of a user's workspaces.
type workspaceListKey struct {
	UserID string
	First  int
	After  string
}

// init sets up the account loaders of owner's request.
func (l *accountLoaders) init(owner *Loaders) {
	l.users.init(owner, fetchUsers, loaderWait)
	l.workspaces.init(owner, fetchWorkspaces, loaderWait)
	l.members.init(owner, fetchMembers, loaderWait)
	l.projects.init(owner, fetchProjects, loaderWait)
	l.workspacesOf.init(owner, fetchWorkspacesOf, loaderWait)
	l.projectLists.init(owner, projectLists, loaderWait)
	l.memberLists.init(owner, memberLists, loaderWait)
	l.workspaceLists.init(owner, workspaceLists, loaderWait)
	l.invitations.init(owner, fetchInvitations, loaderWait)
}

// fetchUsers is the fetch of the users loader.
func fetchUsers(l *Loaders, ctx context.Context, ids []string) ([]*store.User, []error) {
	return byKey(ids, "user", func() (map[string]*store.User, error) { return l.db.UsersByIDs(ctx, ids) })
}

// The fetches of the account loaders that read rows by id as the viewer.
var (
	fetchWorkspaces   = asViewer("workspace", (*store.DB).WorkspacesByIDs)
	fetchProjects     = asViewer("project", (*store.DB).ProjectsByIDs)
	fetchMembers      = listsAsViewer((*store.DB).MembersByWorkspaces)
	fetchWorkspacesOf = listsAsViewer((*store.DB).WorkspacesOfUsers)
)

// asViewer adapts a store method reading rows by id as the viewer into a
// loader fetch: a NOT_FOUND error for an id it does not answer (byKey).
func asViewer[V any](kind string, read func(*store.DB, context.Context, string, []string) (map[string]*V, error)) func(*Loaders, context.Context, []string) ([]*V, []error) {
	return func(l *Loaders, ctx context.Context, ids []string) ([]*V, []error) {
		return byKey(ids, kind, func() (map[string]*V, error) { return read(l.db, ctx, l.viewerID(ctx), ids) })
	}
}

// listsAsViewer adapts a store method reading lists by id as the viewer into
// a loader fetch: an empty list for an id it does not answer (listByKey).
func listsAsViewer[V any](read func(*store.DB, context.Context, string, []string) (map[string][]*V, error)) func(*Loaders, context.Context, []string) ([][]*V, []error) {
	return func(l *Loaders, ctx context.Context, ids []string) ([][]*V, []error) {
		return listByKey(ids, func() (map[string][]*V, error) { return read(l.db, ctx, l.viewerID(ctx), ids) })
	}
}

// fetchInvitations is the fetch of the invitations loader.
func fetchInvitations(l *Loaders, ctx context.Context, keys []store.InvitationPageKey) ([]*store.InvitationConnection, []error) {
	return l.db.InvitationPages(ctx, l.Viewer(ctx), keys)
}

// projectLists is the fetch of the projectLists loader: the pages of keys in
// one query, a NOT_FOUND error for a workspace the viewer is not a member of,
// BAD_USER_INPUT for a bad page.
func projectLists(l *Loaders, ctx context.Context, keys []projectListKey) ([]*store.ProjectConnection, []error) {
	return pagesOf(keys, func(k projectListKey) (store.ProjectList, error) {
		page, err := store.NewPage(&k.First, k.First, &k.After, store.ProjectsScope(k.WorkspaceID, k.IncludeArchived))
		return store.ProjectList{WorkspaceID: k.WorkspaceID, IncludeArchived: k.IncludeArchived, Page: page}, err
	}, func(lists []store.ProjectList) ([]*store.ProjectConnection, error) {
		return l.db.ProjectLists(ctx, l.viewerID(ctx), lists)
	}, workspaceNotFound)
}

// memberLists is the fetch of the memberLists loader: the pages of keys in
// one statement, a NOT_FOUND error for a workspace the viewer is not a member
// of, BAD_USER_INPUT for a bad page.
func memberLists(l *Loaders, ctx context.Context, keys []memberListKey) ([]*store.MemberConnection, []error) {
	return pagesOf(keys, func(k memberListKey) (store.MemberList, error) {
		page, err := store.NewPage(&k.First, k.First, &k.After, store.MembersScope(k.WorkspaceID))
		return store.MemberList{WorkspaceID: k.WorkspaceID, Page: page}, err
	}, func(lists []store.MemberList) ([]*store.MemberConnection, error) {
		return l.db.MemberLists(ctx, l.viewerID(ctx), lists)
	}, workspaceNotFound)
}

// workspaceLists is the fetch of the workspaceLists loader: the pages of keys
// in one statement (an empty page for a user who shares no workspace with
// the viewer), BAD_USER_INPUT for a bad page.
func workspaceLists(l *Loaders, ctx context.Context, keys []workspaceListKey) ([]*store.WorkspaceConnection, []error) {
	return pagesOf(keys, func(k workspaceListKey) (store.WorkspaceList, error) {
		page, err := store.NewPage(&k.First, k.First, &k.After, store.WorkspacesScope(k.UserID))
		return store.WorkspaceList{UserID: k.UserID, Page: page}, err
	}, func(lists []store.WorkspaceList) ([]*store.WorkspaceConnection, error) {
		return l.db.WorkspaceLists(ctx, l.viewerID(ctx), lists)
	}, nil)
}

// workspaceNotFound is the error of a page of a workspace the viewer is not
// a member of.
func workspaceNotFound() error { return errs.Errorf(errs.CodeNotFound, "workspace not found") }

// pagesOf is the shape of the page loaders' fetches: list makes each key's
// list (its error, a bad page, is that key's), fetch reads the lists in one
// call, and each key gets its page, fetch's error, or missing when fetch
// gave it no page (a nil missing leaves that page nil).
func pagesOf[K, L, C any](keys []K, list func(K) (L, error), fetch func([]L) ([]*C, error), missing func() error) ([]*C, []error) {
	out := make([]*C, len(keys))
	failed := make([]error, len(keys))
	var lists []L
	var at []int
	for i, k := range keys {
		l, err := list(k)
		if err != nil {
			failed[i] = err
			continue
		}
		lists = append(lists, l)
		at = append(at, i)
	}
	pages, err := fetch(lists)
	for j, i := range at {
		switch {
		case err != nil:
			failed[i] = err
		case pages[j] == nil && missing != nil:
			failed[i] = missing()
		default:
			out[i] = pages[j]
		}
	}
	return out, failed
}

// byKey runs fetch once and returns its values in the order of keys, with a
// NOT_FOUND error (naming kind) for each key it did not return.
func byKey[V any](keys []string, kind string, fetch func() (map[string]*V, error)) ([]*V, []error) {
	m, err := fetch()
	out := make([]*V, len(keys))
	failed := make([]error, len(keys))
	for i, k := range keys {
		switch v, ok := m[k]; {
		case err != nil:
			failed[i] = err
		case ok:
			out[i] = v
		default:
			failed[i] = errs.Errorf(errs.CodeNotFound, "%s not found", kind)
		}
	}
	return out, failed
}

// listByKey runs fetch once and returns its lists in the order of keys (an empty
// list for a key it did not return).
func listByKey[V any](keys []string, fetch func() (map[string][]*V, error)) ([][]*V, []error) {
	m, err := fetch()
	out := make([][]*V, len(keys))
	var failed []error
	if err != nil {
		failed = make([]error, len(keys))
	}
	for i, k := range keys {
		if err != nil {
			failed[i] = err
			continue
		}
		out[i] = m[k]
		if out[i] == nil {
			out[i] = []*V{}
		}
	}
	return out, failed
}

// Viewer returns the user the request reads as: the user that register or login
// signed in during this request if any, else the bearer token's user, else nil.
func (l *accountLoaders) Viewer(ctx context.Context) *store.User {
	if u := l.signedIn.Load(); u != nil {
		return u
	}
	return auth.UserFrom(ctx)
}

// viewerID returns the id of Viewer, or "" when anonymous.
func (l *accountLoaders) viewerID(ctx context.Context) string {
	if u := l.Viewer(ctx); u != nil {
		return u.ID
	}
	return ""
}

// signIn makes u the viewer of the rest of the request (register, login).
func (l *accountLoaders) signIn(u *store.User) {
	l.signedIn.Store(u)
	l.users.Clear(u.ID)
	l.users.Prime(u.ID, u)
	l.ClearAccountCache()
}

// ClearAccountCache forgets every workspace, member and project read so far in
// this request; mutations that change them call it so later fields see the change.
func (l *accountLoaders) ClearAccountCache() {
	l.workspaces.ClearAll()
	l.members.ClearAll()
	l.projects.ClearAll()
	l.workspacesOf.ClearAll()
	l.projectLists.ClearAll()
	l.memberLists.ClearAll()
	l.workspaceLists.ClearAll()
	l.invitations.ClearAll()
}

// User returns the user with this id, or a NOT_FOUND error. Users are reached
// only through things the caller may already see, so any user is returned.
func (l *accountLoaders) User(ctx context.Context, id string) (*store.User, error) {
	return l.users.Load(ctx, id)
}

// OptionalUser returns the user with this id, or nil for a nil id or an
// account that no longer exists (an audit event's actor, an inviter).
func (l *accountLoaders) OptionalUser(ctx context.Context, id *string) (*store.User, error) {
	if id == nil {
		l.users.Skip(ctx)
		return nil, nil
	}
	u, err := l.users.Load(ctx, *id)
	if errs.CodeOf(err) == errs.CodeNotFound {
		return nil, nil
	}
	return u, err
}

// Workspace returns the workspace with this id with the viewer's role, or a
// NOT_FOUND error if it does not exist or the viewer is not a member.
func (l *accountLoaders) Workspace(ctx context.Context, id string) (*store.Workspace, error) {
	if l.Viewer(ctx) == nil {
		return nil, errs.ErrUnauthenticated
	}
	return l.workspaces.Load(ctx, id)
}

// Members returns the members of a workspace the viewer is a member of, newest
// first (empty for any other workspace): the deprecated Workspace.members.
func (l *accountLoaders) Members(ctx context.Context, workspaceID string) ([]*store.Member, error) {
	if l.Viewer(ctx) == nil {
		return nil, errs.ErrUnauthenticated
	}
	return l.members.Load(ctx, workspaceID)
}

// Project returns the project with this id (archived or not), or a NOT_FOUND
// error if it does not exist or lives in a workspace the viewer is not in.
func (l *accountLoaders) Project(ctx context.Context, id string) (*store.Project, error) {
	if l.Viewer(ctx) == nil {
		return nil, errs.ErrUnauthenticated
	}
	return l.projects.Load(ctx, id)
}

// WorkspacesOf returns the workspaces of a user that the viewer can see: all of
// them for the viewer itself, the shared ones for anybody else, newest first
// (the deprecated User.workspaces).
func (l *accountLoaders) WorkspacesOf(ctx context.Context, userID string) ([]*store.Workspace, error) {
	if l.Viewer(ctx) == nil {
		return []*store.Workspace{}, nil
	}
	return l.workspacesOf.Load(ctx, userID)
}

// Projects returns a page of a workspace's projects, newest first, without the
// archived ones unless includeArchived. It returns BAD_USER_INPUT for first
// outside 1..100 or a cursor of another list, and NOT_FOUND if the viewer is not
// a member of the workspace. Pages of several workspaces are fetched together.
func (l *accountLoaders) Projects(ctx context.Context, workspaceID string, includeArchived bool, first *int, after *string) (*store.ProjectConnection, error) {
	if l.Viewer(ctx) == nil {
		return nil, errs.ErrUnauthenticated
	}
	page, err := store.NewPage(first, defaultPageSize, after, store.ProjectsScope(workspaceID, includeArchived))
	if err != nil {
		return nil, err
	}
	k := projectListKey{WorkspaceID: workspaceID, IncludeArchived: includeArchived, First: page.First}
	if after != nil {
		k.After = *after
	}
	return l.projectLists.Load(ctx, k)
}

// MemberPage returns a page of a workspace's members, newest first by
// (joinedAt, user id), the order of Members. It returns BAD_USER_INPUT for
// first outside 1..100 or a cursor of another list, and NOT_FOUND if the
// viewer is not a member of the workspace. Pages of several workspaces are
// fetched together.
func (l *accountLoaders) MemberPage(ctx context.Context, workspaceID string, first *int, after *string) (*store.MemberConnection, error) {
	if l.Viewer(ctx) == nil {
		l.memberLists.Skip(ctx)
		return nil, errs.ErrUnauthenticated
	}
	page, err := store.NewPage(first, defaultPageSize, after, store.MembersScope(workspaceID))
	if err != nil {
		l.memberLists.Skip(ctx)
		return nil, err
	}
	k := memberListKey{WorkspaceID: workspaceID, First: page.First}
	if after != nil {
		k.After = *after
	}
	return l.memberLists.Load(ctx, k)
}

// WorkspacePage returns a page of the workspaces of a user that the viewer
// can see (WorkspacesOf's: all of them for the viewer itself, the shared ones
// for anybody else; none for no viewer), newest first by (createdAt, id), the
// order of WorkspacesOf. It returns BAD_USER_INPUT for first outside 1..100
// or a cursor of another list. Pages of several users are fetched together.
func (l *accountLoaders) WorkspacePage(ctx context.Context, userID string, first *int, after *string) (*store.WorkspaceConnection, error) {
	scope := store.WorkspacesScope(userID)
	page, err := store.NewPage(first, defaultPageSize, after, scope)
	if err != nil {
		l.workspaceLists.Skip(ctx)
		return nil, err
	}
	k := workspaceListKey{UserID: userID, First: page.First}
	if after != nil {
		k.After = *after
	}
	return l.workspaceLists.Load(ctx, k)
}

// Invitations returns a page of a workspace's open invitations, newest first.
// It returns BAD_USER_INPUT for first outside 1..100 or a cursor of another
// list, NOT_FOUND if the viewer is not a member of the workspace, and
// FORBIDDEN for a MEMBER or VIEWER. Pages of several workspaces are fetched
// together.
func (l *accountLoaders) Invitations(ctx context.Context, workspaceID string, first *int, after *string) (*store.InvitationConnection, error) {
	if l.Viewer(ctx) == nil {
		return nil, errs.ErrUnauthenticated
	}
	k, err := store.NewInvitationPageKey(workspaceID, first, after)
	if err != nil {
		return nil, err
	}
	return l.invitations.Load(ctx, k)
}

// InvitationsOf returns a page of the open invitations of userID's e-mail,
// newest first, if userID is the viewer, and an empty page for anyone else
// (a User is reached through other users' workspaces too, and the field must
// not fail there). It returns BAD_USER_INPUT for first outside 1..100 or a
// cursor of another list.
func (l *accountLoaders) InvitationsOf(ctx context.Context, userID string, first *int, after *string) (*store.InvitationConnection, error) {
	k, err := store.NewInvitationPageKey("", first, after)
	if err != nil {
		l.invitations.Skip(ctx)
		return nil, err
	}
	if v := l.Viewer(ctx); v == nil || v.ID != userID {
		l.invitations.Skip(ctx)
		return &store.InvitationConnection{Edges: []*store.InvitationEdge{}}, nil
	}
	return l.invitations.Load(ctx, k)
}

// defaultPageSize is the first of a connection when the schema gives none.
const defaultPageSize = 20
