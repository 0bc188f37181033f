package httpapi

import (
	_ "embed"
	"encoding/json"
	"regexp"
	"strings"
)

//go:embed playground_examples.graphql
var playgroundExamples string

// PlaygroundTab is one ready example the GraphiQL playground opens as a tab.
type PlaygroundTab struct {
	// Name is the operation's name, a title for the tab.
	Name string `json:"name"`
	// Query is the GraphQL document of the tab, with its comments.
	Query string `json:"query"`
	// Variables is a JSON object of example variables to fill in.
	Variables string `json:"variables,omitempty"`
}

// requiredVariable matches a non-null variable definition ($id: ID!).
var requiredVariable = regexp.MustCompile(`\$(\w+):\s*\w+!`)

var operationName = regexp.MustCompile(`(?m)^(?:query|mutation)\s+(\w+)`)

// AuditPlaygroundTabs returns the example queries for browsing the audit log
// (playground_examples.graphql, tabs separated by a "# ---" line), for GraphiQL's
// defaultTabs: the playground of GET / opens them.
func AuditPlaygroundTabs() []PlaygroundTab {
	var tabs []PlaygroundTab
	for _, doc := range strings.Split(playgroundExamples, "# ---\n") {
		doc = strings.TrimSpace(doc) + "\n"
		tab := PlaygroundTab{Query: doc}
		if m := operationName.FindStringSubmatch(doc); m != nil {
			tab.Name = m[1]
		}
		vars := map[string]string{}
		for _, m := range requiredVariable.FindAllStringSubmatch(doc, -1) {
			vars[m[1]] = "<" + m[1] + ">"
		}
		if len(vars) > 0 {
			b, _ := json.MarshalIndent(vars, "", "  ")
			tab.Variables = string(b)
		}
		tabs = append(tabs, tab)
	}
	return tabs
}
