// The example tabs the playground opens with: browsing a workspace's audit
// history (auditEvents with filters and paging), one's own account events and
// the hash-chain check. Each tab carries its own variables; the Authorization
// header is shared (see fetcher.js).

const eventFields = `id
      occurredAt
      action
      entityType
      entityId
      actor { id name email }
      ip
      userAgent
      requestId
      metadata`;

export const examples = [
  {
    query: `# A workspace's audit history, newest
# first (OWNER and ADMIN only).
# 1. Sign in: in Headers below, replace
#    <paste your token> with the token
#    that register or login returned.
# 2. Put a workspace id in Variables
#    (tab MyWorkspaces lists yours).
# 3. Run (Ctrl-Enter). Next page: set
#    "after" to pageInfo.endCursor.
query AuditEvents($workspaceId: ID!, $first: Int = 20, $after: String) {
  auditEvents(workspaceId: $workspaceId, first: $first, after: $after) {
    nodes {
      ${eventFields}
    }
    pageInfo { hasNextPage endCursor }
  }
}
`,
    variables: `{
  "workspaceId": "",
  "first": 20,
  "after": null
}`,
  },
  {
    query: `# Filtered audit history. Filters
# combine with AND:
#   actions: exact, or prefix* (task.*)
#   actorId: who did it
#   entityType + entityId: one thing
#   since (inclusive), until (exclusive)
# A cursor works only with the workspace
# and filter it came from.
query FilteredAuditEvents($workspaceId: ID!, $filter: AuditEventFilter, $first: Int = 20, $after: String) {
  auditEvents(workspaceId: $workspaceId, filter: $filter, first: $first, after: $after) {
    edges {
      cursor
      node {
        ${eventFields.replace(/\n      /g, '\n        ')}
      }
    }
    pageInfo { hasNextPage endCursor }
  }
}
`,
    variables: `{
  "workspaceId": "",
  "filter": {
    "actions": ["task.*", "member.joined"],
    "since": "2026-01-01T00:00:00Z"
  },
  "first": 10,
  "after": null
}`,
  },
  {
    query: `# The history of one thing (a task, a
# project, a member's user id...),
# newest first.
query EntityHistory($workspaceId: ID!, $entityType: String!, $entityId: ID!, $after: String) {
  auditEvents(
    workspaceId: $workspaceId
    filter: { entityType: $entityType, entityId: $entityId }
    first: 50
    after: $after
  ) {
    nodes { occurredAt action actor { name email } metadata }
    pageInfo { hasNextPage endCursor }
  }
}
`,
    variables: `{
  "workspaceId": "",
  "entityType": "task",
  "entityId": ""
}`,
  },
  {
    query: `# Who am I, my workspaces (the audit
# tabs need their ids), and my own
# account events (sign-ins, failed
# logins), newest first.
query MyWorkspaces($after: String) {
  me {
    id
    name
    email
    workspacesConnection(first: 20) {
      nodes { id name viewerRole }
    }
    auditEvents(first: 20, after: $after) {
      nodes { occurredAt action ip userAgent }
      pageInfo { hasNextPage endCursor }
    }
  }
}
`,
    variables: `{
  "after": null
}`,
  },
  {
    query: `# Check the workspace's audit hash
# chain: the first event whose hash
# does not match (OWNER, ADMIN only).
query VerifyAuditLog($workspaceId: ID!) {
  verifyAuditLog(workspaceId: $workspaceId) {
    valid
    checkedEvents
    firstInvalidEventId
    headHash
  }
}
`,
    variables: `{
  "workspaceId": ""
}`,
  },
];
