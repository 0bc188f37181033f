package store

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// User is an account. PasswordHash never leaves the store: it is not serialised
// and is marked secret for the audit log.
type User struct {
	ID           string    `json:"id" audit:"track"`
	Email        string    `json:"email" audit:"track"`
	Name         string    `json:"name" audit:"track"`
	PasswordHash string    `json:"-" audit:"secret"`
	CreatedAt    time.Time `json:"createdAt" audit:"ignore"`
}

// AuthPayload is the answer of register and login: a bearer token and its user.
type AuthPayload struct {
	Token string `json:"token"`
	User  *User  `json:"user"`
}

// Workspace is a team's space. ViewerRole is the role of the user who loaded it.
type Workspace struct {
	ID         string    `json:"id" audit:"track"`
	Name       string    `json:"name" audit:"track"`
	CreatedAt  time.Time `json:"createdAt" audit:"ignore"`
	ViewerRole Role      `json:"viewerRole" audit:"ignore"`
}

// Member is a user's membership of a workspace.
type Member struct {
	WorkspaceID string    `json:"workspaceId" audit:"track"`
	UserID      string    `json:"userId" audit:"track"`
	Role        Role      `json:"role" audit:"track"`
	JoinedAt    time.Time `json:"joinedAt" audit:"ignore"`
}

// Invitation is an open invitation of an e-mail address to join a workspace
// with a role. WorkspaceName is read with it, for an invitee who cannot see the
// workspace yet; InvitedByID is nil once the inviter's account is gone.
type Invitation struct {
	ID            string    `json:"id" audit:"track"`
	WorkspaceID   string    `json:"workspaceId" audit:"track"`
	WorkspaceName string    `json:"workspaceName" audit:"ignore"`
	Email         string    `json:"email" audit:"track"`
	Role          Role      `json:"role" audit:"track"`
	InvitedByID   *string   `json:"invitedById" audit:"track"`
	CreatedAt     time.Time `json:"createdAt" audit:"ignore"`
	ExpiresAt     time.Time `json:"expiresAt" audit:"track"`
}

// Project groups tasks in a workspace.
type Project struct {
	ID          string     `json:"id" audit:"track"`
	WorkspaceID string     `json:"workspaceId" audit:"track"`
	Name        string     `json:"name" audit:"track"`
	Description *string    `json:"description" audit:"track"`
	ArchivedAt  *time.Time `json:"archivedAt" audit:"track"`
	CreatedAt   time.Time  `json:"createdAt" audit:"ignore"`
	UpdatedAt   time.Time  `json:"updatedAt" audit:"ignore"`
}

// Archived reports whether the project is archived.
func (p *Project) Archived() bool { return p.ArchivedAt != nil }

// Task is a unit of work in a project.
type Task struct {
	ID          string       `json:"id" audit:"track"`
	ProjectID   string       `json:"projectId" audit:"track"`
	WorkspaceID string       `json:"workspaceId" audit:"track"`
	Title       string       `json:"title" audit:"track"`
	Description *string      `json:"description" audit:"track"`
	Status      TaskStatus   `json:"status" audit:"track"`
	Priority    TaskPriority `json:"priority" audit:"track"`
	AssigneeID  *string      `json:"assigneeId" audit:"track"`
	DueDate     *time.Time   `json:"dueDate" audit:"track"`
	CreatedByID string       `json:"createdById" audit:"track"`
	CreatedAt   time.Time    `json:"createdAt" audit:"ignore"`
	UpdatedAt   time.Time    `json:"updatedAt" audit:"ignore"`
}

// Comment is a remark on a task.
type Comment struct {
	ID          string    `json:"id" audit:"track"`
	TaskID      string    `json:"taskId" audit:"track"`
	WorkspaceID string    `json:"workspaceId" audit:"track"`
	AuthorID    string    `json:"authorId" audit:"track"`
	Body        string    `json:"body" audit:"track"`
	CreatedAt   time.Time `json:"createdAt" audit:"ignore"`
	UpdatedAt   time.Time `json:"updatedAt" audit:"ignore"`
}

// AuditEvent is one row of the append-only audit log.
type AuditEvent struct {
	ID          string    `json:"id"`
	WorkspaceID *string   `json:"workspaceId"`
	ActorID     *string   `json:"actorId"`
	Action      string    `json:"action"`
	EntityType  string    `json:"entityType"`
	EntityID    string    `json:"entityId"`
	OccurredAt  time.Time `json:"occurredAt"`
	IP          *string   `json:"ip"`
	UserAgent   *string   `json:"userAgent"`
	RequestID   *string   `json:"requestId"`
	Metadata    RawJSON   `json:"metadata"`
	// Sealed reports that the sealer chained the event; until it did,
	// ChainPosition, PrevHash, Hash and SealedAt are nil.
	Sealed bool `json:"sealed"`
	// ChainPosition is the event's position in its hash chain (1 is the first).
	ChainPosition *int64 `json:"chainPosition"`
	// PrevHash is the hash the event's hash covers before it (hex): the hash
	// of the event before it, nil for the first of its chain.
	PrevHash *string `json:"prevHash"`
	// Hash is SHA-256 over PrevHash and the event's canonical encoding (hex).
	Hash *string `json:"hash"`
	// TraceID is the W3C trace id of the request, when it was traced.
	TraceID *string `json:"traceId"`
	// SealedAt is when the sealer chained the event (the clock of the
	// instance whose sealer did); nil until it did. The hash does not cover
	// it: it shows an auditor an event written long after its OccurredAt.
	SealedAt *time.Time `json:"sealedAt"`
}

// RawJSON is a JSON value kept as its compact text, as Postgres gave it: an
// audit event's metadata goes from the jsonb column to the response without
// being decoded into Go maps and encoded again. It is the JSON scalar on output
// (MarshalGQL) and in exports (MarshalJSON); nil is null.
type RawJSON []byte

// MarshalGQL writes the JSON text as it is.
func (r RawJSON) MarshalGQL(w io.Writer) {
	if len(r) == 0 {
		_, _ = io.WriteString(w, "null")
		return
	}
	_, _ = w.Write(r)
}

// UnmarshalGQL takes a JSON scalar given as input (decoded by gqlgen) back to
// text.
func (r *RawJSON) UnmarshalGQL(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("JSON: %w", err)
	}
	*r = b
	return nil
}

// MarshalJSON returns the JSON text as it is.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps a copy of the JSON text.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// AuditVerification is the outcome of walking a workspace's hash chain.
type AuditVerification struct {
	// Valid reports that every seal recomputes, no event is missing from
	// or added to the chain, the head is the last seal, and a checkpoint
	// presented with a good signature is extended.
	Valid bool `json:"valid"`
	// CheckedEvents is SealedEvents + UnsealedEvents: every event of the
	// chain that was looked at.
	CheckedEvents int `json:"checkedEvents"`
	// FirstInvalidEventID is the first event that failed, in chain order;
	// for a checkpoint past the end of the log, the newest event left. It is
	// set whenever Valid is false, but for a chain with no event, seal or
	// anchor left to name.
	FirstInvalidEventID *string `json:"firstInvalidEventId"`
	// HeadHash is the hash of the chain's newest seal (hex).
	HeadHash *string `json:"headHash"`
	// SealedEvents is the number of events whose seal was recomputed.
	SealedEvents int `json:"sealedEvents"`
	// UnsealedEvents is the number of committed events the sealer has not
	// reached yet.
	UnsealedEvents int `json:"unsealedEvents"`
	// HeadPosition is the position of the chain's newest seal.
	HeadPosition *int64 `json:"headPosition"`
	// Checkpoint is the outcome for the checkpoint presented, if one was.
	Checkpoint *AuditCheckpointVerification `json:"checkpoint"`
	// BackdatedEvents is the number of sealed events, among those the walk
	// read, whose occurred_at is earlier than the latest occurred_at of the
	// events before them in the chain by more than backdateTolerance, and
	// the chain's first event read when it is earlier so than the event just
	// before it in spine order, of any chain (chainWalk.firstBackdated):
	// events written with a time in the past, or by an instance whose clock
	// was behind. It does not make Valid false; it is for the auditor to look
	// at.
	BackdatedEvents int `json:"backdatedEvents"`
	// FirstBackdatedEventID is the first of them in chain order; nil when
	// there is none.
	FirstBackdatedEventID *string `json:"firstBackdatedEventId"`
}

// AuditCheckpointVerification is the outcome of checking a checkpoint a
// customer kept against the current log.
type AuditCheckpointVerification struct {
	// Valid is SignatureValid and Extended.
	Valid bool `json:"valid"`
	// SignatureValid reports that a key this server trusts, the one the
	// checkpoint names, verifies its signature.
	SignatureValid bool `json:"signatureValid"`
	// Extended reports that the seal at the checkpoint's position has the
	// checkpoint's hash and that the chain is intact from there to its head.
	Extended bool   `json:"extended"`
	Position int64  `json:"position"`
	KeyID    string `json:"keyId"`
	// Reason says why Valid is false; nil when it is true.
	Reason *string `json:"reason"`
}

// PageInfo tells whether a connection has more items after EndCursor.
type PageInfo struct {
	HasNextPage bool `json:"hasNextPage"`
	// last is the page's last edge; nil for an empty page.
	last interface{ Cursor() string }
}

// EndCursor returns the cursor of the page's last edge, made now, or nil for
// an empty page.
func (p PageInfo) EndCursor() *string {
	if p.last == nil {
		return nil
	}
	c := p.last.Cursor()
	return &c
}

// MarshalJSON encodes the page info as the API shows it: hasNextPage and
// endCursor.
func (p PageInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		HasNextPage bool    `json:"hasNextPage"`
		EndCursor   *string `json:"endCursor"`
	}{p.HasNextPage, p.EndCursor()})
}

// Edge is one item of a connection with its position in the list. Its cursor
// is made only when asked for (Cursor): a page whose cursors nobody reads
// (nodes only) does not make them.
type Edge[T any] struct {
	Node *T `json:"node"`
	// list is what the edges of the page share to make their cursors; nil
	// for an edge made outside a page (its cursor is "").
	list *edgeList[T]
	// rank is the item's search rank, in the cursor of a search result.
	rank float32
}

// edgeList is what the edges of one page share to make their cursors.
type edgeList[T any] struct {
	// scope is the cursor scope of the list (see cursor).
	scope string
	// key returns an item's position: its (created_at, id) or equivalent.
	key func(*T) (time.Time, string)
	// search says the cursors are searchCursors, which carry the edge's rank.
	search bool
}

// Cursor returns the opaque cursor of the edge's position in its list, made
// now.
func (e Edge[T]) Cursor() string {
	if e.list == nil {
		return ""
	}
	at, id := e.list.key(e.Node)
	if e.list.search {
		return encodeSearchCursor(e.rank, at, id, e.list.scope)
	}
	return encodeCursor(at, id, e.list.scope)
}

// MarshalJSON encodes the edge as the API shows it: cursor and node.
func (e Edge[T]) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Cursor string `json:"cursor"`
		Node   *T     `json:"node"`
	}{e.Cursor(), e.Node})
}

// Connection is one page of a keyset-paginated list, newest first.
type Connection[T any] struct {
	Edges    []*Edge[T] `json:"edges"`
	PageInfo PageInfo   `json:"pageInfo"`
	// list is what the page's edges share.
	list edgeList[T]
	// settled is what Settle recorded; nil for nothing.
	settled func(typ, field string) bool
}

// Settle records settled as the fields (by GraphQL type and field name)
// whose values for every item of the page, and below them, were read with
// it and wait in the request's loaders, so that resolving them waits on
// nothing (inorder.Settler). A page is settled before anyone else sees it.
func (c *Connection[T]) Settle(settled func(typ, field string) bool) {
	c.settled = settled
}

// Settled reports whether Settle recorded field of typ as settled.
func (c *Connection[T]) Settled(typ, field string) bool {
	return c.settled != nil && c.settled(typ, field)
}

// Nodes returns the items of the page.
func (c *Connection[T]) Nodes() []*T {
	nodes := make([]*T, len(c.Edges))
	for i, e := range c.Edges {
		nodes[i] = e.Node
	}
	return nodes
}

// Role is a member's role in a workspace.
type Role string

// Roles, from most to least powerful.
const (
	RoleOwner  Role = "OWNER"
	RoleAdmin  Role = "ADMIN"
	RoleMember Role = "MEMBER"
	RoleViewer Role = "VIEWER"
)

// rank orders roles: higher is more powerful.
func (r Role) rank() int {
	switch r {
	case RoleOwner:
		return 4
	case RoleAdmin:
		return 3
	case RoleMember:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// AtLeast reports whether r is as powerful as min.
func (r Role) AtLeast(min Role) bool { return r.rank() >= min.rank() }

// TaskStatus is where a task stands.
type TaskStatus string

// Task statuses.
const (
	TaskStatusTodo       TaskStatus = "TODO"
	TaskStatusInProgress TaskStatus = "IN_PROGRESS"
	TaskStatusDone       TaskStatus = "DONE"
)

// TaskPriority is how urgent a task is.
type TaskPriority string

// Task priorities.
const (
	TaskPriorityLow    TaskPriority = "LOW"
	TaskPriorityMedium TaskPriority = "MEDIUM"
	TaskPriorityHigh   TaskPriority = "HIGH"
	TaskPriorityUrgent TaskPriority = "URGENT"
)

// enumValid reports whether s is one of values.
func enumValid[T ~string](s T, values ...T) bool {
	for _, v := range values {
		if s == v {
			return true
		}
	}
	return false
}

// IsValid reports whether r is a known role.
func (r Role) IsValid() bool { return enumValid(r, RoleOwner, RoleAdmin, RoleMember, RoleViewer) }

// IsValid reports whether s is a known status.
func (s TaskStatus) IsValid() bool {
	return enumValid(s, TaskStatusTodo, TaskStatusInProgress, TaskStatusDone)
}

// IsValid reports whether p is a known priority.
func (p TaskPriority) IsValid() bool {
	return enumValid(p, TaskPriorityLow, TaskPriorityMedium, TaskPriorityHigh, TaskPriorityUrgent)
}

// unmarshalEnum implements graphql.Unmarshaler for the string enums.
func unmarshalEnum[T interface {
	~string
	IsValid() bool
}](dst *T, v any, name string) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s must be a string", name)
	}
	*dst = T(s)
	if !(*dst).IsValid() {
		return fmt.Errorf("%q is not a valid %s", s, name)
	}
	return nil
}

// UnmarshalGQL implements graphql.Unmarshaler.
func (r *Role) UnmarshalGQL(v any) error { return unmarshalEnum(r, v, "Role") }

// MarshalGQL implements graphql.Marshaler.
func (r Role) MarshalGQL(w io.Writer) { io.WriteString(w, strconv.Quote(string(r))) }

// UnmarshalGQL implements graphql.Unmarshaler.
func (s *TaskStatus) UnmarshalGQL(v any) error { return unmarshalEnum(s, v, "TaskStatus") }

// MarshalGQL implements graphql.Marshaler.
func (s TaskStatus) MarshalGQL(w io.Writer) { marshalEnum(w, s) }

// ScanBytes implements pgtype.BytesScanner: a known status read from the
// database is its constant, not a new string.
func (s *TaskStatus) ScanBytes(src []byte) error {
	return scanEnum(s, src, TaskStatusTodo, TaskStatusInProgress, TaskStatusDone)
}

// UnmarshalGQL implements graphql.Unmarshaler.
func (p *TaskPriority) UnmarshalGQL(v any) error { return unmarshalEnum(p, v, "TaskPriority") }

// MarshalGQL implements graphql.Marshaler.
func (p TaskPriority) MarshalGQL(w io.Writer) { marshalEnum(w, p) }

// ScanBytes implements pgtype.BytesScanner: a known priority read from the
// database is its constant, not a new string.
func (p *TaskPriority) ScanBytes(src []byte) error {
	return scanEnum(p, src, TaskPriorityLow, TaskPriorityMedium, TaskPriorityHigh, TaskPriorityUrgent)
}

// marshalEnum writes an enum value as a GraphQL string. A known value (upper
// case letters and underscores) needs no escaping and is written as it is,
// without making a quoted copy.
func marshalEnum[T interface {
	~string
	IsValid() bool
}](w io.Writer, v T) {
	if !v.IsValid() {
		io.WriteString(w, strconv.Quote(string(v)))
		return
	}
	io.WriteString(w, `"`)
	io.WriteString(w, string(v))
	io.WriteString(w, `"`)
}

// scanEnum reads a text column into dst: one of known without allocating,
// else a copy of src. NULL is an error, as for a string.
func scanEnum[T ~string](dst *T, src []byte, known ...T) error {
	if src == nil {
		return fmt.Errorf("cannot scan NULL into %T", dst)
	}
	for _, k := range known {
		if string(src) == string(k) {
			*dst = k
			return nil
		}
	}
	*dst = T(src)
	return nil
}

// Connection and edge types of the schema, bound by gqlgen.
type (
	// TaskConnection is a page of tasks.
	TaskConnection = Connection[Task]
	// TaskEdge is a task with its cursor.
	TaskEdge = Edge[Task]
	// ProjectConnection is a page of projects.
	ProjectConnection = Connection[Project]
	// ProjectEdge is a project with its cursor.
	ProjectEdge = Edge[Project]
	// CommentConnection is a page of comments.
	CommentConnection = Connection[Comment]
	// CommentEdge is a comment with its cursor.
	CommentEdge = Edge[Comment]
	// AttachmentConnection is a page of attachments.
	AttachmentConnection = Connection[Attachment]
	// AttachmentEdge is an attachment with its cursor.
	AttachmentEdge = Edge[Attachment]
	// InvitationConnection is a page of invitations.
	InvitationConnection = Connection[Invitation]
	// InvitationEdge is an invitation with its cursor.
	InvitationEdge = Edge[Invitation]
	// MemberConnection is a page of a workspace's members.
	MemberConnection = Connection[Member]
	// MemberEdge is a member with its cursor.
	MemberEdge = Edge[Member]
	// WorkspaceConnection is a page of workspaces.
	WorkspaceConnection = Connection[Workspace]
	// WorkspaceEdge is a workspace with its cursor.
	WorkspaceEdge = Edge[Workspace]
	// AuditEventConnection is a page of audit events.
	AuditEventConnection = Connection[AuditEvent]
	// AuditEventEdge is an audit event with its cursor.
	AuditEventEdge = Edge[AuditEvent]
)
