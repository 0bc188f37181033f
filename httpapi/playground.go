package httpapi

import (
	"net/http"

	"taskflow/httpapi/playground"
)

// playgroundTab is one example tab of the playground: a GraphQL document with its
// variables and request headers (JSON texts, as GraphiQL edits them).
type playgroundTab struct {
	Query     string `json:"query"`
	Variables string `json:"variables,omitempty"`
	Headers   string `json:"headers,omitempty"`
}

// tokenHeaders are the headers of the example tabs that need a signed-in user.
const tokenHeaders = `{
  "Authorization": "Bearer PASTE_THE_TOKEN_FROM_LOGIN_HERE"
}`

// playgroundTabs are the tabs the playground opens with: sign in, find a
// workspace, then browse its audit history.
var playgroundTabs = []playgroundTab{
	{
		Query: `# Welcome to TaskFlow. Sign in here, then copy the token into the
# Headers editor of the other tabs:  {"Authorization": "Bearer <token>"}
mutation Login($email: String!, $password: String!) {
  login(email: $email, password: $password) {
    token
    user { id email name }
  }
}
`,
		Variables: `{
  "email": "admin@example.com",
  "password": "correct horse battery staple"
}`,
		Headers: `{}`,
	},
	{
		Query: `# Your workspaces and your role in each: the ids to use in the audit tabs.
# Next page: pass pageInfo.endCursor as after.
query MyWorkspaces($after: String) {
  me {
    id
    email
    workspacesConnection(first: 100, after: $after) {
      nodes { id name viewerRole }
      pageInfo { hasNextPage endCursor }
    }
  }
}
`,
		Headers: tokenHeaders,
	},
	{
		Query: `# The latest audit events of a workspace (OWNER and ADMIN), newest first.
query AuditLatest($workspaceId: ID!) {
  auditEvents(workspaceId: $workspaceId, first: 20) {
    nodes {
      id
      occurredAt
      action
      entityType
      entityId
      actor { id email name }
      ip
      userAgent
      requestId
      metadata
      sealed
      sealedAt
    }
    pageInfo { hasNextPage endCursor }
  }
}
`,
		Variables: `{
  "workspaceId": "PASTE_A_WORKSPACE_ID"
}`,
		Headers: tokenHeaders,
	},
	{
		Query: `# Audit events filtered by action (exact, or a prefix with *), actor and time
# (since inclusive, until exclusive); the filters combine with AND.
# Next page: set "after" to pageInfo.endCursor. A cursor only works with the
# workspace and filter it came from.
query AuditFiltered($workspaceId: ID!, $filter: AuditEventFilter, $after: String) {
  auditEvents(workspaceId: $workspaceId, filter: $filter, first: 50, after: $after) {
    edges {
      cursor
      node { id occurredAt action entityType entityId actorId requestId metadata }
    }
    pageInfo { hasNextPage endCursor }
  }
}
`,
		Variables: `{
  "workspaceId": "PASTE_A_WORKSPACE_ID",
  "filter": {
    "actions": ["task.*", "comment.deleted"],
    "since": "2026-01-01T00:00:00Z",
    "until": "2027-01-01T00:00:00Z"
  },
  "after": null
}`,
		Headers: tokenHeaders,
	},
	{
		Query: `# The whole history of one thing, e.g. a task: every change with what changed
# (metadata.changes = {field: {from, to}} on updates).
query EntityHistory($workspaceId: ID!, $entityType: String!, $entityId: ID!) {
  auditEvents(
    workspaceId: $workspaceId
    filter: { entityType: $entityType, entityId: $entityId }
    first: 100
  ) {
    nodes { occurredAt action actor { email } requestId metadata }
    pageInfo { hasNextPage endCursor }
  }
}
`,
		Variables: `{
  "workspaceId": "PASTE_A_WORKSPACE_ID",
  "entityType": "task",
  "entityId": "PASTE_A_TASK_ID"
}`,
		Headers: tokenHeaders,
	},
	{
		Query: `# Checks the workspace's audit hash chain (OWNER and ADMIN). backdatedEvents
# counts events written with a time well before the events sealed before
# them: not invalid, but worth a look (compare occurredAt and sealedAt).
query VerifyAuditLog($workspaceId: ID!) {
  verifyAuditLog(workspaceId: $workspaceId) {
    valid
    checkedEvents
    firstInvalidEventId
    headHash
    unsealedEvents
    backdatedEvents
    firstBackdatedEventId
  }
}
`,
		Variables: `{
  "workspaceId": "PASTE_A_WORKSPACE_ID"
}`,
		Headers: tokenHeaders,
	},
	{
		Query: `# Your own account events (sign-ins, failed sign-ins, registration).
query MyAccountEvents($after: String) {
  me {
    auditEvents(first: 20, after: $after) {
      nodes { occurredAt action ip userAgent requestId }
      pageInfo { hasNextPage endCursor }
    }
  }
}
`,
		Variables: `{
  "after": null
}`,
		Headers: tokenHeaders,
	},
	{
		Query: `# The live audit log (OWNER and ADMIN): run it, make a change in another
# window, and watch the events arrive. Add after: "<a cursor>" to resume.
subscription LiveAudit($workspaceId: ID!) {
  auditEventAdded(workspaceId: $workspaceId) {
    cursor
    event {
      occurredAt
      action
      entityType
      entityId
      actor { id email name }
      metadata
    }
  }
}
`,
		Variables: `{
  "workspaceId": "PASTE_A_WORKSPACE_ID"
}`,
		Headers: tokenHeaders,
	},
}

// playgroundRoutes adds the playground to mux: GET / and its embedded GraphiQL
// bundle under /playground/assets/ (package playground; no CDN), opening with
// playgroundTabs.
func playgroundRoutes(mux *http.ServeMux) {
	tabs := make([]playground.Tab, len(playgroundTabs))
	for i, t := range playgroundTabs {
		tabs[i] = playground.Tab{Query: t.Query, Variables: t.Variables, Headers: t.Headers}
	}
	playground.New(tabs...).Register(mux)
}
