package querydoc

import (
	"fmt"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator/core"
)

// noFragmentCyclesRule is gqlparser's NoFragmentCycles with the fragment of a
// spread found in a map instead of Fragments.ForName, a scan of every
// fragment per spread (the square of a document of spreads and fragments).
// Everything else, the order of the search and the errors, is gqlparser's
// (v2.5.64, MIT licence).
var noFragmentCyclesRule = core.Rule{
	Name: "NoFragmentCycles",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		visitedFrags := make(map[string]bool)
		cycles := 0
		var fragments map[string]*ast.FragmentDefinition

		observers.OnFragment(func(walker *core.Walker, fragment *ast.FragmentDefinition) {
			if fragments == nil {
				fragments = make(map[string]*ast.FragmentDefinition, len(walker.Document.Fragments))
				for _, f := range walker.Document.Fragments {
					if _, dup := fragments[f.Name]; !dup {
						fragments[f.Name] = f
					}
				}
			}
			var spreadPath []*ast.FragmentSpread
			spreadPathIndexByName := make(map[string]int)

			var recursive func(fragment *ast.FragmentDefinition)
			recursive = func(fragment *ast.FragmentDefinition) {
				if visitedFrags[fragment.Name] {
					return
				}
				visitedFrags[fragment.Name] = true

				spreadNodes := fragmentSpreads(fragment.SelectionSet)
				if len(spreadNodes) == 0 {
					return
				}
				spreadPathIndexByName[fragment.Name] = len(spreadPath)

				for _, spreadNode := range spreadNodes {
					spreadName := spreadNode.Name
					cycleIndex, ok := spreadPathIndexByName[spreadName]
					spreadPath = append(spreadPath, spreadNode)
					if !ok {
						if spreadFragment := fragments[spreadName]; spreadFragment != nil {
							recursive(spreadFragment)
						}
					} else {
						// The path is copied and written out only for errors
						// that can be shown (Validator shows maxErrors): a
						// chain of fragments that each spread the first would
						// otherwise cost the square of its length.
						cycles++
						if cycles > maxErrors {
							addError(core.At(spreadNode.Position))
						} else {
							cyclePath := append([]*ast.FragmentSpread(nil), spreadPath[cycleIndex:len(spreadPath)-1]...)
							addError(cycleMessage(spreadName, cyclePath), core.At(spreadNode.Position))
						}
					}
					spreadPath = spreadPath[:len(spreadPath)-1]
				}
				delete(spreadPathIndexByName, fragment.Name)
			}
			recursive(fragment)
		})
	},
}

// cycleMessage is gqlparser's message of a cycle, written when applied.
func cycleMessage(spreadName string, cyclePath []*ast.FragmentSpread) core.ErrorOption {
	return func(err *gqlerror.Error) {
		var fragmentNames []string
		for _, fs := range cyclePath {
			fragmentNames = append(fragmentNames, fmt.Sprintf(`"%s"`, fs.Name))
		}
		var via string
		if len(fragmentNames) != 0 {
			via = fmt.Sprintf(" via %s", strings.Join(fragmentNames, ", "))
		}
		err.Message += fmt.Sprintf(`Cannot spread fragment "%s" within itself%s.`, spreadName, via)
	}
}

// fragmentSpreads returns the spreads in a selection set at any depth, in
// gqlparser's order (a stack of the selection sets still to visit).
func fragmentSpreads(node ast.SelectionSet) []*ast.FragmentSpread {
	var spreads []*ast.FragmentSpread
	setsToVisit := []ast.SelectionSet{node}
	for len(setsToVisit) != 0 {
		set := setsToVisit[len(setsToVisit)-1]
		setsToVisit = setsToVisit[:len(setsToVisit)-1]
		for _, selection := range set {
			switch selection := selection.(type) {
			case *ast.FragmentSpread:
				spreads = append(spreads, selection)
			case *ast.Field:
				setsToVisit = append(setsToVisit, selection.SelectionSet)
			case *ast.InlineFragment:
				setsToVisit = append(setsToVisit, selection.SelectionSet)
			}
		}
	}
	return spreads
}
