package querydoc

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
	"github.com/vektah/gqlparser/v2/validator"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// repeatf writes f(i) for i in [0, n).
func repeatf(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(f(i))
	}
	return b.String()
}

// attackShapes are the documents of issue #13 and the other shapes that
// cost gqlparser the square of their size (or a 1 MiB name's suggestions),
// by their size n (about n fields or tokens).
var attackShapes = []struct {
	name string
	doc  func(n int) string
}{
	{"typename", func(n int) string { return "#c\n{" + strings.Repeat(" __typename", n) + " }" }},
	{"unknown-fields", func(n int) string { return "{" + strings.Repeat(" nope", n) + " }" }},
	{"same-name-subfields", func(n int) string {
		return "{" + repeatf(n/4, func(i int) string { return fmt.Sprintf(" me { a%d: id }", i) }) + " }"
	}},
	{"conflicts", func(n int) string {
		return "{" + strings.Repeat(" x: __typename", n/2) + strings.Repeat(" x: me { id }", n/4) + " }"
	}},
	{"spreads", func(n int) string {
		return "{" + strings.Repeat(" ...F", n/2) + " } fragment F on Query { __typename }"
	}},
	{"distinct-fragments", func(n int) string {
		return "{" + repeatf(n/10, func(i int) string { return fmt.Sprintf(" ...F%d", i) }) + " }" +
			repeatf(n/10, func(i int) string { return fmt.Sprintf(" fragment F%d on Query { __typename }", i) })
	}},
	{"fragment-chain", func(n int) string {
		k := n / 7
		return "{ ...F0 }" + repeatf(k, func(i int) string { return fmt.Sprintf(" fragment F%d on Query { ...F%d }", i, i+1) }) +
			fmt.Sprintf(" fragment F%d on Query { __typename }", k)
	}},
	{"operations-one-fragment", func(n int) string {
		return repeatf(n/10, func(i int) string { return fmt.Sprintf(" query Q%d { ...F }", i) }) +
			" fragment F on Query {" + strings.Repeat(" __typename", n/2) + " }"
	}},
	{"long-unknown-name", func(n int) string { return "{ " + strings.Repeat("a", 70*n) + " }" }},
}

// reportCPU reports the CPU time the process spent per operation (user and
// system, the garbage collector's included) as cpu-ms/op, from the call to
// the call of the function it returns: on a machine shared with other work
// the wall time per operation also counts the waiting.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParseValidate measures parse and validation of each attack shape
// at 2,000 to 14,000 by gqlparser alone (gqlgen's pipeline before querydoc),
// by Prepare with DefaultLimits (the server's), and by Prepare with only the
// token limit (the linear rules on their own, over every size), in CPU time
// per operation (cpu-ms/op):
//
//	go test ./querydoc -run '^$' -bench ParseValidate -benchtime 1x
func BenchmarkParseValidate(b *testing.B) {
	for _, s := range attackShapes {
		for _, n := range []int{2000, 4000, 8000, 14000} {
			q := s.doc(n)
			b.Run(fmt.Sprintf("%s/n=%d/gqlparser", s.name, n), func(b *testing.B) {
				defer reportCPU(b)()
				for b.Loop() {
					doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: q}, DefaultLimits.Tokens)
					if err == nil {
						validator.ValidateWithRules(taskflowSchema, doc, rules.NewDefaultRules())
					}
				}
			})
			for _, p := range []struct {
				name   string
				limits Limits
			}{{"querydoc", DefaultLimits}, {"linear-rules", Limits{Tokens: DefaultLimits.Tokens}}} {
				v := NewValidator(taskflowSchema, p.limits)
				b.Run(fmt.Sprintf("%s/n=%d/%s", s.name, n, p.name), func(b *testing.B) {
					defer reportCPU(b)()
					for b.Loop() {
						v.Prepare(q)
					}
				})
			}
		}
	}
}
