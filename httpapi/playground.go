package httpapi

import (
	"bytes"
	"html/template"
	"net/http"
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
query MyWorkspaces {
  me {
    id
    email
    workspaces { id name viewerRole }
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
		Query: `# Checks the workspace's audit hash chain (OWNER and ADMIN).
query VerifyAuditLog($workspaceId: ID!) {
  verifyAuditLog(workspaceId: $workspaceId) {
    valid
    checkedEvents
    firstInvalidEventId
    headHash
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
}

// playgroundPage is GraphiQL with the header editor open and the example tabs.
// GraphiQL and React come from a CDN, pinned with subresource integrity.
var playgroundPage = template.Must(template.New("playground").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>TaskFlow GraphQL playground</title>
  <style>
    body { margin: 0; }
    #graphiql { height: 100vh; }
    .loading { height: 100%; display: flex; align-items: center; justify-content: center; font: 2rem sans-serif; }
  </style>
  <script src="https://cdn.jsdelivr.net/npm/react@18.2.0/umd/react.production.min.js"
    integrity="sha256-S0lp+k7zWUMk2ixteM6HZvu8L9Eh//OVrt+ZfbCpmgY=" crossorigin="anonymous"></script>
  <script src="https://cdn.jsdelivr.net/npm/react-dom@18.2.0/umd/react-dom.production.min.js"
    integrity="sha256-IXWO0ITNDjfnNXIu5POVfqlgYoop36bDzhodR6LW5Pc=" crossorigin="anonymous"></script>
  <link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/graphiql@4.1.2/graphiql.min.css"
    integrity="sha256-MEh+B2NdMSpj9kexQNN3QKc8UzMrCXW/Sx/phcpuyIU=" crossorigin="anonymous">
</head>
<body>
  <div id="graphiql"><div class="loading">Loading the TaskFlow playground…</div></div>
  <script src="https://cdn.jsdelivr.net/npm/graphiql@4.1.2/graphiql.min.js"
    integrity="sha256-hnImuor1znlJkD/FOTL3jayfS/xsyNoP04abi8bFJWs=" crossorigin="anonymous"></script>
  <script>
    const endpoint = location.protocol + '//' + location.host + {{.Endpoint}};
    const tabs = {{.Tabs}};
    ReactDOM.render(
      React.createElement(GraphiQL, {
        fetcher: GraphiQL.createFetcher({ url: endpoint }),
        // The Headers editor is where the Authorization header is set.
        isHeadersEditorEnabled: true,
        defaultEditorToolsVisibility: 'headers',
        shouldPersistHeaders: false,
        defaultTabs: tabs,
        defaultHeaders: tabs[0].headers,
      }),
      document.getElementById('graphiql'),
    );
  </script>
</body>
</html>
`))

// playgroundHandler serves the GraphiQL playground for the GraphQL endpoint at
// path endpoint.
func playgroundHandler(endpoint string) http.Handler {
	var buf bytes.Buffer
	if err := playgroundPage.Execute(&buf, map[string]any{"Endpoint": endpoint, "Tabs": playgroundTabs}); err != nil {
		panic(err)
	}
	page := buf.Bytes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(page)
	})
}
