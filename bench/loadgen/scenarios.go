package loadgen

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/google/uuid"
)

// Scenario is one kind of work the harness measures, as each contender does
// it: a TaskFlow GraphQL request, the least raw SQL the work needs, and the
// equivalent PostGraphile request (when PostGraphile has one).
type Scenario struct {
	Name string
	// Target is the least TaskFlow / raw SQL throughput ratio it must reach;
	// 0: none.
	Target float64
	// PeerTarget is the least TaskFlow / PostGraphile throughput ratio it must
	// reach (checked when PostGraphile ran); 0: none. Issue #17's goals: 3x for
	// task(id), 2x for a page of tasks, 1x for createTask; the other reads at
	// least PostGraphile's.
	PeerTarget float64
	// CPU is the most CPU per request TaskFlow may use, as multiples of
	// PostGraphile's in the same run (checked when both CPUs were measured).
	CPU CPUTarget
	// Fresh makes the replay of TaskFlow's statements use new UUIDs for
	// non-fixture ids.
	Fresh bool
	// PerWorker says its requests depend on the worker (the client), which a
	// replay of one captured request can't follow: it has no replay.
	PerWorker bool
	// Want is text every successful answer of TaskFlow and PostGraphile holds
	// (a row of what was asked for): a 200 without errors but with nothing
	// found counts as a failure too.
	Want string
	// request returns the user and body of TaskFlow request i of worker w.
	request func(f *Fixtures, w, i int) (FixtureUser, []byte)
	// raw is the least SQL the work needs.
	raw rawWork
	// peer returns the body of PostGraphile request i of worker w; nil: it has
	// no equivalent.
	peer func(f *Fixtures, w, i int) []byte
	// writes, for a scenario that writes, returns the projects its requests
	// add tasks to and how many tasks a successful request adds there: after
	// each contender's run the harness counts them (writeCheck), so that a
	// contender that answers without writing fails instead of measuring less
	// than the work. nil for the reads.
	writes func(f *Fixtures) (projects []string, each int)
}

// CPUTarget bounds TaskFlow's CPU per request against PostGraphile's: its
// server process's against PostGraphile's node (Server) and its Postgres
// backends' against PostGraphile's (Postgres); 0: no bound.
type CPUTarget struct{ Server, Postgres float64 }

// The CPU targets. A read's server CPU is at most node's: the Go server does
// the auth, limits and loaders node does not, and still should not cost more
// per request. Its Postgres CPU is at most 1.5x: TaskFlow's statements also
// check the viewer's membership. A create's Postgres CPU is at most 2.5x:
// three rows (the task, its audit event, the key's record) and the key's claim
// against one insert.
var (
	readCPU   = CPUTarget{Server: 1, Postgres: 1.5}
	createCPU = CPUTarget{Server: 1, Postgres: 2.5}
)

const (
	createTaskMutation = `mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title status } }`
	peerCreateTask     = `mutation($t: TaskInput!) { createTask(input: {task: $t}) { task { rowId title status } } }`
)

// Scenarios are all the scenarios, in report order: reads first, so that they
// read the fixtures as they were written, then the writes, which add tens of
// thousands of rows.
var Scenarios = []Scenario{
	{Name: "task", Target: 0.25, PeerTarget: 3, CPU: readCPU, Want: `"title":"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(`query($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`,
				map[string]any{"id": f.task(i)})
		},
		raw: rawTask,
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(`query($id: UUID!) { taskByRowId(rowId: $id) { rowId title status priority dueDate userByAssigneeId { rowId name } } }`,
				map[string]any{"id": f.task(i)})
		}},
	{Name: "taskList", PeerTarget: 2, CPU: readCPU, Want: `"priority":"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(`query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title status priority } } } }`,
				map[string]any{"id": f.BoardID})
		},
		raw: rawTaskList,
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(`query($id: UUID!) { projectByRowId(rowId: $id) { tasksByProjectId(first: 20, orderBy: [CREATED_AT_DESC, ROW_ID_DESC]) {
				nodes { rowId title status priority } } } }`, map[string]any{"id": f.BoardID})
		}},
	{Name: "taskPage", PeerTarget: 1, CPU: readCPU, Want: `"body":"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(`query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title status assignee { id name }
			comments(first: 5) { nodes { id body author { id name } } } } pageInfo { hasNextPage endCursor } } } }`,
				map[string]any{"id": f.BoardID})
		},
		raw: rawTaskPage,
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(`query($id: UUID!) { projectByRowId(rowId: $id) { tasksByProjectId(first: 20, orderBy: [CREATED_AT_DESC, ROW_ID_DESC]) {
				nodes { rowId title status userByAssigneeId { rowId name }
				commentsByTaskId(first: 5, orderBy: [CREATED_AT_DESC, ROW_ID_DESC]) { nodes { rowId body userByAuthorId { rowId name } } } }
				pageInfo { hasNextPage endCursor } } } }`, map[string]any{"id": f.BoardID})
		}},
	{Name: "searchTasks", PeerTarget: 1, CPU: readCPU, Want: `"title":"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.searcher(i), gql(`query($ws: ID!, $q: String!) { searchTasks(workspaceId: $ws, query: $q, first: 20) { nodes { id title status } pageInfo { hasNextPage } } }`,
				map[string]any{"ws": f.WorkspaceID, "q": searchWords[i%len(searchWords)]})
		},
		raw: rawSearchTasks,
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(`query($ws: UUID!, $q: String!) { peerSearchTasks(ws: $ws, q: $q, first: 20) { nodes { rowId title status } pageInfo { hasNextPage } } }`,
				map[string]any{"ws": f.WorkspaceID, "q": searchWords[i%len(searchWords)]})
		}},
	{Name: "auditEvents", PeerTarget: 1, CPU: readCPU, Want: `"action":"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(`query($ws: ID!) { auditEvents(workspaceId: $ws, first: 50) { nodes { id action entityType entityId occurredAt actorId metadata } pageInfo { hasNextPage } } }`,
				map[string]any{"ws": f.WorkspaceID})
		},
		raw: rawAuditEvents,
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(`query($ws: UUID!) { allAuditEvents(first: 50, condition: {workspaceId: $ws}, orderBy: [OCCURRED_AT_DESC, ROW_ID_DESC]) {
				nodes { rowId action entityType entityId occurredAt actorId metadata } pageInfo { hasNextPage } } }`,
				map[string]any{"ws": f.WorkspaceID})
		}},
	{Name: "createTask", PeerTarget: 1, CPU: createCPU, Fresh: true, Want: `"status":"TODO"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(createTaskMutation, map[string]any{"key": uuid.NewString(),
				"in": map[string]any{"projectId": f.InboxID, "title": taskTitle(i)}})
		},
		raw: rawCreateTask(false),
		peer: func(f *Fixtures, w, i int) []byte {
			return gql(peerCreateTask, map[string]any{"t": map[string]any{
				"projectId": f.InboxID, "workspaceId": f.WorkspaceID, "createdBy": f.user(i).ID, "title": taskTitle(i)}})
		},
		writes: func(f *Fixtures) ([]string, int) { return []string{f.InboxID}, 1 }},
	// createTaskSpread is createTask with each of the clients in a workspace
	// of its own: against createTask, what one busy workspace costs.
	{Name: "createTaskSpread", Fresh: true, PerWorker: true, Want: `"status":"TODO"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.user(i), gql(createTaskMutation, map[string]any{"key": uuid.NewString(),
				"in": map[string]any{"projectId": f.spread(w).InboxID, "title": taskTitle(i)}})
		},
		raw: rawCreateTask(true),
		peer: func(f *Fixtures, w, i int) []byte {
			s := f.spread(w)
			return gql(peerCreateTask, map[string]any{"t": map[string]any{
				"projectId": s.InboxID, "workspaceId": s.WorkspaceID, "createdBy": f.user(i).ID, "title": taskTitle(i)}})
		},
		writes: func(f *Fixtures) ([]string, int) {
			var inboxes []string
			for _, s := range f.Spread {
				inboxes = append(inboxes, s.InboxID)
			}
			return inboxes, 1
		}},
	// replayStorm repeats one keyed createTask: every request is a replay.
	// PostGraphile has no idempotency keys, so no equivalent.
	{Name: "replayStorm", Fresh: true, Want: `"status":"TODO"`,
		request: func(f *Fixtures, w, i int) (FixtureUser, []byte) {
			return f.Users[0], gql(createTaskMutation, map[string]any{"key": stormKey,
				"in": map[string]any{"projectId": f.InboxID, "title": "storm task"}})
		},
		raw: rawReplay,
		// Every request is a repeat (the capture's warm-up made the first):
		// none adds a task.
		writes: func(f *Fixtures) ([]string, int) { return []string{f.InboxID}, 0 }},
}

// stormKey is the idempotency key every replayStorm request sends.
const stormKey = "storm-key"

func taskTitle(i int) string { return fmt.Sprintf("load task %d", i) }

// user spreads requests over the fixture users (budgets are per user).
func (f *Fixtures) user(i int) FixtureUser { return f.Users[i%len(f.Users)] }

// searcher spreads searchTasks over the searchers (its endpoint limit is per
// user).
func (f *Fixtures) searcher(i int) FixtureUser { return f.Searchers[i%len(f.Searchers)] }

// maxSearchRate is the most searches a second a run is assumed to make: a
// few times what a 2-core box serves.
const maxSearchRate = 5000

// searchLimit is the endpoint limit of searchTasks per user a minute, the
// contract's (ratelimit.Config.Search): a burst of that many, then one every
// 60/searchLimit seconds.
const searchLimit = 60

// searchers returns how many users searchTasks needs so that none of them
// reaches its endpoint limit in a contender's warm-up and run (a 429 would
// count as a failure): at maxSearchRate, or, when cfg.Requests bounds a run,
// its warm-up, its run and the capture's few. A run bounded by its requests
// may end in well under a second, so it counts on no refill: each user has
// its burst only (at -n 300, 9 searchers made 63 of 610 searches fail).
func searchers(cfg Config) int {
	t := (cfg.Warmup + cfg.Duration).Seconds() + 1
	total := maxSearchRate * t
	perUser := searchLimit + t*searchLimit/60
	if bounded := float64(2*cfg.Requests + 10); cfg.Requests > 0 && bounded < total {
		total, perUser = bounded, searchLimit
	}
	return int(math.Ceil(total / perUser))
}

// task spreads reads over the fixture tasks.
func (f *Fixtures) task(i int) string { return f.TaskIDs[i%len(f.TaskIDs)] }

// spread is the workspace of worker w in createTaskSpread.
func (f *Fixtures) spread(w int) SpreadWorkspace { return f.Spread[w%len(f.Spread)] }

func gql(query string, vars map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		panic(err)
	}
	return b
}

// ScenarioNamed returns the scenario called name.
func ScenarioNamed(name string) (Scenario, bool) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
