package schema

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
)

// Change is one difference between two versions of a schema.
type Change struct {
	// Breaking is true when a client that worked against the old schema can
	// fail against the new one.
	Breaking bool
	// Path is the changed element: Type, Type.field, Type.field(arg), @directive.
	Path string
	// Message says what changed.
	Message string
}

// String formats c as "BREAKING: path: message" or "non-breaking: ...".
func (c Change) String() string {
	kind := "non-breaking"
	if c.Breaking {
		kind = "BREAKING"
	}
	return fmt.Sprintf("%s: %s: %s", kind, c.Path, c.Message)
}

// Compare lists the changes from old to new, sorted by path. Breaking are:
// a removed type, field, argument, input field, enum value, union member,
// implemented interface, directive or directive location; a changed type
// kind or root operation type; an output field type that may now return what
// it could not (nullable where it was non-null, another named type, list vs
// not); an argument or input field type that refuses what it accepted
// (non-null where it was nullable, another named type, list vs not); a changed
// default value; a new required argument, directive argument or input field
// (non-null without a default). Anything else that clients can see (new types,
// fields, optional arguments, enum values, union members, deprecations) is a
// non-breaking change. Descriptions and built-in types are not compared.
func Compare(old, new *ast.Schema) []Change {
	var cs changes
	for _, op := range []struct {
		name     string
		old, new *ast.Definition
	}{{"query", old.Query, new.Query}, {"mutation", old.Mutation, new.Mutation}, {"subscription", old.Subscription, new.Subscription}} {
		o, n := defName(op.old), defName(op.new)
		switch {
		case o != "" && o != n:
			cs.add(true, "schema."+op.name, "root type changed from %q to %q", o, n)
		case o == "" && n != "":
			cs.add(false, "schema."+op.name, "root type %s added", n)
		}
	}
	for _, name := range sortedKeys(old.Types) {
		if builtinType(name) {
			continue
		}
		ot, nt := old.Types[name], new.Types[name]
		if nt == nil {
			cs.add(true, name, "type removed")
			continue
		}
		if ot.Kind != nt.Kind {
			cs.add(true, name, "kind changed from %s to %s", ot.Kind, nt.Kind)
			continue
		}
		switch ot.Kind {
		case ast.Object, ast.Interface:
			compareFields(&cs, ot, nt)
		case ast.InputObject:
			compareInputFields(&cs, ot, nt)
		case ast.Enum:
			for _, v := range ot.EnumValues {
				if nt.EnumValues.ForName(v.Name) == nil {
					cs.add(true, name+"."+v.Name, "enum value removed")
				}
			}
			for _, v := range nt.EnumValues {
				ov := ot.EnumValues.ForName(v.Name)
				if ov == nil {
					cs.add(false, name+"."+v.Name, "enum value added")
				} else {
					deprecations(&cs, name+"."+v.Name, ov.Directives, v.Directives)
				}
			}
		case ast.Union:
			setDiff(&cs, name, "union member", ot.Types, nt.Types)
		}
	}
	for _, name := range sortedKeys(new.Types) {
		if !builtinType(name) && old.Types[name] == nil {
			cs.add(false, name, "type added")
		}
	}
	compareDirectives(&cs, old, new)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Path < cs[j].Path })
	return cs
}

// Breaking returns the breaking changes among cs.
func Breaking(cs []Change) []Change {
	var b []Change
	for _, c := range cs {
		if c.Breaking {
			b = append(b, c)
		}
	}
	return b
}

type changes []Change

func (cs *changes) add(breaking bool, path, format string, args ...any) {
	*cs = append(*cs, Change{Breaking: breaking, Path: path, Message: fmt.Sprintf(format, args...)})
}

func compareFields(cs *changes, ot, nt *ast.Definition) {
	for _, of := range ot.Fields {
		if strings.HasPrefix(of.Name, "__") {
			continue
		}
		path := ot.Name + "." + of.Name
		nf := nt.Fields.ForName(of.Name)
		if nf == nil {
			cs.add(true, path, "field removed")
			continue
		}
		if !safeOutput(of.Type, nf.Type) {
			cs.add(true, path, "type changed from %s to %s", of.Type, nf.Type)
		} else if of.Type.String() != nf.Type.String() {
			cs.add(false, path, "type narrowed from %s to %s", of.Type, nf.Type)
		}
		compareArgs(cs, path, of.Arguments, nf.Arguments)
		deprecations(cs, path, of.Directives, nf.Directives)
	}
	for _, nf := range nt.Fields {
		if !strings.HasPrefix(nf.Name, "__") && ot.Fields.ForName(nf.Name) == nil {
			cs.add(false, ot.Name+"."+nf.Name, "field added")
		}
	}
	setDiff(cs, ot.Name, "implemented interface", ot.Interfaces, nt.Interfaces)
}

func compareArgs(cs *changes, path string, old, new ast.ArgumentDefinitionList) {
	for _, oa := range old {
		p := path + "(" + oa.Name + ")"
		na := new.ForName(oa.Name)
		if na == nil {
			cs.add(true, p, "argument removed")
			continue
		}
		compareInput(cs, p, oa.Type, na.Type, oa.DefaultValue, na.DefaultValue)
		deprecations(cs, p, oa.Directives, na.Directives)
	}
	for _, na := range new {
		if old.ForName(na.Name) == nil {
			p := path + "(" + na.Name + ")"
			if required(na.Type, na.DefaultValue) {
				cs.add(true, p, "required argument added (%s without a default)", na.Type)
			} else {
				cs.add(false, p, "optional argument added")
			}
		}
	}
}

func compareInputFields(cs *changes, ot, nt *ast.Definition) {
	for _, of := range ot.Fields {
		p := ot.Name + "." + of.Name
		nf := nt.Fields.ForName(of.Name)
		if nf == nil {
			cs.add(true, p, "input field removed")
			continue
		}
		compareInput(cs, p, of.Type, nf.Type, of.DefaultValue, nf.DefaultValue)
		deprecations(cs, p, of.Directives, nf.Directives)
	}
	for _, nf := range nt.Fields {
		if ot.Fields.ForName(nf.Name) == nil {
			p := ot.Name + "." + nf.Name
			if required(nf.Type, nf.DefaultValue) {
				cs.add(true, p, "required input field added (%s without a default)", nf.Type)
			} else {
				cs.add(false, p, "optional input field added")
			}
		}
	}
}

func compareInput(cs *changes, path string, ot, nt *ast.Type, od, nd *ast.Value) {
	if !safeInput(ot, nt) {
		cs.add(true, path, "type changed from %s to %s", ot, nt)
	} else if ot.String() != nt.String() {
		cs.add(false, path, "type widened from %s to %s", ot, nt)
	}
	switch {
	case od != nil && nd == nil:
		cs.add(true, path, "default value %s removed", od)
	case od != nil && od.String() != nd.String():
		cs.add(true, path, "default value changed from %s to %s", od, nd)
	case od == nil && nd != nil:
		cs.add(false, path, "default value %s added", nd)
	}
}

func compareDirectives(cs *changes, old, new *ast.Schema) {
	for _, name := range sortedKeys(old.Directives) {
		if builtinDirective(name) {
			continue
		}
		od, nd := old.Directives[name], new.Directives[name]
		path := "@" + name
		if nd == nil {
			cs.add(true, path, "directive removed")
			continue
		}
		var ol, nl []string
		for _, l := range od.Locations {
			ol = append(ol, string(l))
		}
		for _, l := range nd.Locations {
			nl = append(nl, string(l))
		}
		setDiff(cs, path, "location", ol, nl)
		if od.IsRepeatable && !nd.IsRepeatable {
			cs.add(true, path, "no longer repeatable")
		}
		compareArgs(cs, path, od.Arguments, nd.Arguments)
	}
	for _, name := range sortedKeys(new.Directives) {
		if !builtinDirective(name) && old.Directives[name] == nil {
			cs.add(false, "@"+name, "directive added")
		}
	}
}

// safeOutput reports whether every value of type nt is a value of type ot,
// so a client reading a field of type ot still understands it.
func safeOutput(ot, nt *ast.Type) bool {
	if ot.NonNull && !nt.NonNull {
		return false
	}
	if (ot.Elem == nil) != (nt.Elem == nil) {
		return false
	}
	if ot.Elem != nil {
		return safeOutput(ot.Elem, nt.Elem)
	}
	return ot.NamedType == nt.NamedType
}

// safeInput reports whether every value accepted by type ot is accepted by nt,
// so a client sending an argument of type ot is still understood.
func safeInput(ot, nt *ast.Type) bool {
	if !ot.NonNull && nt.NonNull {
		return false
	}
	if (ot.Elem == nil) != (nt.Elem == nil) {
		return false
	}
	if ot.Elem != nil {
		return safeInput(ot.Elem, nt.Elem)
	}
	return ot.NamedType == nt.NamedType
}

func required(t *ast.Type, def *ast.Value) bool { return t.NonNull && def == nil }

func deprecations(cs *changes, path string, old, new ast.DirectiveList) {
	o, n := old.ForName("deprecated") != nil, new.ForName("deprecated") != nil
	switch {
	case !o && n:
		cs.add(false, path, "deprecated")
	case o && !n:
		cs.add(false, path, "no longer deprecated")
	}
}

func setDiff(cs *changes, path, what string, old, new []string) {
	in := func(xs []string, x string) bool {
		for _, y := range xs {
			if y == x {
				return true
			}
		}
		return false
	}
	for _, o := range old {
		if !in(new, o) {
			cs.add(true, path, "%s %s removed", what, o)
		}
	}
	for _, n := range new {
		if !in(old, n) {
			cs.add(false, path, "%s %s added", what, n)
		}
	}
}

func defName(d *ast.Definition) string {
	if d == nil {
		return ""
	}
	return d.Name
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
