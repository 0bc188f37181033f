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
    query: `# Audit history of a workspace, newest first (OWNER and ADMIN only).
#
# 1. Sign in: open the Headers tab below and replace <paste your token>
#    with the token that the register or login mutation returned.
# 2. Find a workspace id with the "MyWorkspaces" tab and put it in Variables.
# 3. Run (Ctrl-Enter). For the next page, set "after" to pageInfo.endCursor.
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
    query: `# Filtered audit history. Filters combine with AND:
#   actions     exact actions or a prefix with * ("task.*", "member.*")
#   actorId     who did it;  entityType + entityId: one thing's history
#   since       inclusive;   until: exclusive (RFC 3339 times)
# A cursor only works with the workspace and filter it came from.
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
    "actions": ["task.*", "member.added"],
    "since": "2026-01-01T00:00:00Z"
  },
  "first": 10,
  "after": null
}`,
  },
  {
    query: `# The history of one thing: every event of one entity (a task, a project,
# a member's user id, ...), newest first.
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
    query: `# Who am I, my workspaces (their ids are what the audit tabs need), and my
# own account events (sign-ins, failed logins), newest first.
query MyWorkspaces($after: String) {
  me {
    id
    name
    email
    workspaces { id name viewerRole }
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
    query: `# Walk the workspace's audit hash chain and report the first event whose
# hash does not match (OWNER and ADMIN only).
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
