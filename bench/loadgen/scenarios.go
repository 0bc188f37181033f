package loadgen

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
)

// Scenario is one kind of request the harness sends at fixed concurrency.
type Scenario struct {
	Name string
	// Target is the least server/raw-SQL throughput ratio it must reach; 0: none.
	Target float64
	// Fresh makes the raw replay use new UUIDs for non-fixture ids.
	Fresh bool
	// request returns the user and body of request i.
	request func(f *Fixtures, i int) (FixtureUser, []byte)
}

// Scenarios are all the scenarios, in report order.
var Scenarios = []Scenario{
	{Name: "createTask", Target: 0.5, Fresh: true, request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.user(i), gql(`mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title status } }`,
			map[string]any{"key": uuid.NewString(), "in": map[string]any{"projectId": f.InboxID, "title": fmt.Sprintf("load task %d", i)}})
	}},
	{Name: "replayStorm", Fresh: true, request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.Users[0], gql(`mutation($in: CreateTaskInput!, $key: String) { createTask(input: $in, idempotencyKey: $key) { id title status } }`,
			map[string]any{"key": "storm-key", "in": map[string]any{"projectId": f.InboxID, "title": "storm task"}})
	}},
	{Name: "task", Target: 0.3, request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.user(i), gql(`query($id: ID!) { task(id: $id) { id title status priority dueDate assignee { id name } } }`,
			map[string]any{"id": f.TaskIDs[i%len(f.TaskIDs)]})
	}},
	{Name: "taskPage", request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.user(i), gql(`query($id: ID!) { project(id: $id) { tasks(first: 20) { nodes { id title status assignee { id name }
			comments(first: 5) { nodes { id body author { id name } } } } pageInfo { hasNextPage endCursor } } } }`,
			map[string]any{"id": f.BoardID})
	}},
	{Name: "searchTasks", request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.user(i), gql(`query($ws: ID!, $q: String!) { searchTasks(workspaceId: $ws, query: $q, first: 20) { nodes { id title status } pageInfo { hasNextPage } } }`,
			map[string]any{"ws": f.WorkspaceID, "q": searchWords[i%len(searchWords)]})
	}},
	{Name: "auditEvents", request: func(f *Fixtures, i int) (FixtureUser, []byte) {
		return f.user(i), gql(`query($ws: ID!) { auditEvents(workspaceId: $ws, first: 50) { nodes { id action entityType entityId occurredAt actorId metadata } pageInfo { hasNextPage } } }`,
			map[string]any{"ws": f.WorkspaceID})
	}},
}

// user spreads requests over the fixture users (budgets are per user).
func (f *Fixtures) user(i int) FixtureUser { return f.Users[i%len(f.Users)] }

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
