package task

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// MaxYAMLDepth bounds how deeply frontmatter may nest. The bound is checked
// on the token stream before the YAML is parsed, so a document nested
// 10,000 levels deep is a parse error and never a deep recursion. Depth
// counts open flow collections ([ and {) plus block indentation levels
// (mapping keys and sequence entries at increasing columns).
const MaxYAMLDepth = 64

// position index: dotted key path -> 1-based line in the file.
type positions map[string]int

func (p positions) line(path string) int {
	for path != "" {
		if l, ok := p[path]; ok {
			return l
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// parseYAMLMapping parses frontmatter YAML into a JSON-friendly map.
// lineOffset is added to YAML line numbers so errors name the file's line.
// Rules (from DESIGN §3 and issue 3): anchors and aliases are refused (an
// alias bomb of a few hundred bytes expands without bound); nesting deeper
// than MaxYAMLDepth is an error; duplicate keys are errors; dates and times
// become ISO-8601 strings without consulting the machine's time zone; a
// !!set becomes a sorted list; non-finite floats become the nonFinite
// values ".inf", "-.inf" and ".nan"; tags other than the YAML core ones are refused; the
// document must be a mapping (empty frontmatter is an empty mapping).
// Plain scalars resolve by the YAML 1.2 core schema, so yes/no stay strings
// in metadata; boolean fields (allow_internet) also accept yes/no/on/off as
// PyYAML, and so BenchFlow, reads them.
func parseYAMLMapping(src string, lineOffset int) (map[string]any, positions, error) {
	toks := lexer.Tokenize(src)
	if err := checkYAMLDepth(toks, lineOffset); err != nil {
		return nil, nil, err
	}
	file, err := parser.Parse(toks, 0)
	if err != nil {
		return nil, nil, yamlSyntaxError(err, lineOffset)
	}
	var docs []*ast.DocumentNode
	for _, d := range file.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return map[string]any{}, positions{}, nil
	}
	if len(docs) > 1 {
		return nil, nil, errAt(nodeLine(docs[1].Body, lineOffset), "", "frontmatter holds more than one YAML document")
	}
	if err := refuseAnchors(docs[0], lineOffset); err != nil {
		return nil, nil, err
	}
	c := &yamlConv{off: lineOffset, pos: positions{}}
	v, err := c.value(docs[0].Body, "")
	if err != nil {
		return nil, nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, nil, errAt(nodeLine(docs[0].Body, lineOffset), "", "frontmatter is %s, not a mapping", kindOf(v))
	}
	return m, c.pos, nil
}

func yamlSyntaxError(err error, off int) error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		line := 0
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			line = tk.Position.Line + off - 1
		}
		return &fileError{line: line, msg: "invalid YAML: " + shiftPositions(ye.GetMessage(), off), err: err}
	}
	return &fileError{msg: "invalid YAML: " + firstLine(err.Error()), err: err}
}

var yamlPosRE = regexp.MustCompile(`\[(\d+):(\d+)\]`)

// shiftPositions rewrites go-yaml's "[line:column]" references inside a
// message into file lines ("line 3").
func shiftPositions(msg string, off int) string {
	return yamlPosRE.ReplaceAllStringFunc(msg, func(m string) string {
		sub := yamlPosRE.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[1])
		return "line " + strconv.Itoa(n+off-1)
	})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func nodeLine(n ast.Node, off int) int {
	if n == nil {
		return 0
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0
	}
	return tk.Position.Line + off - 1
}

// checkYAMLDepth estimates the nesting depth from the token stream (the
// lexer is iterative) and refuses documents deeper than MaxYAMLDepth.
func checkYAMLDepth(toks token.Tokens, off int) error {
	flow := 0
	var cols []int
	push := func(col int) {
		for len(cols) > 0 && cols[len(cols)-1] > col {
			cols = cols[:len(cols)-1]
		}
		if len(cols) == 0 || cols[len(cols)-1] < col {
			cols = append(cols, col)
		}
	}
	var prev *token.Token
	for _, tk := range toks {
		if tk == nil || tk.Position == nil {
			continue
		}
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			if flow > 0 {
				flow--
			}
		case token.SequenceEntryType, token.MappingKeyType:
			if flow == 0 {
				push(tk.Position.Column)
			}
		case token.MappingValueType:
			if flow == 0 && prev != nil && prev.Position != nil {
				push(prev.Position.Column)
			}
		}
		if flow+len(cols) > MaxYAMLDepth {
			return errAt(tk.Position.Line+off-1, "", "frontmatter nests deeper than %d levels", MaxYAMLDepth)
		}
		if tk.Type != token.CommentType && tk.Type != token.SpaceType {
			prev = tk
		}
	}
	return nil
}

type anchorFinder struct {
	found ast.Node
}

func (a *anchorFinder) Visit(n ast.Node) ast.Visitor {
	if a.found != nil {
		return nil
	}
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		a.found = n
		return nil
	}
	return a
}

// refuseAnchors walks the AST before any value is built and refuses YAML
// anchors and aliases: an alias bomb of a few hundred bytes expands without
// bound, and no real task needs them.
func refuseAnchors(doc ast.Node, off int) error {
	f := &anchorFinder{}
	ast.Walk(f, doc)
	switch n := f.found.(type) {
	case *ast.AnchorNode:
		return errAt(nodeLine(n, off), "", "YAML anchors and aliases are not allowed (anchor &%s)", anchorName(n.Name))
	case *ast.AliasNode:
		return errAt(nodeLine(n, off), "", "YAML anchors and aliases are not allowed (alias *%s)", anchorName(n.Value))
	}
	return nil
}

func anchorName(n ast.Node) string {
	if n == nil || n.GetToken() == nil {
		return ""
	}
	return n.GetToken().Value
}

type yamlConv struct {
	off int
	pos positions
}

func (c *yamlConv) line(n ast.Node) int { return nodeLine(n, c.off) }

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (c *yamlConv) value(n ast.Node, path string) (any, error) {
	switch n := n.(type) {
	case nil:
		return nil, nil
	case *ast.NullNode:
		return nil, nil
	case *ast.StringNode:
		if n.Token != nil && n.Token.Type == token.StringType {
			if ts, ok := yamlTimestamp(n.Value); ok {
				return ts, nil
			}
		}
		return n.Value, nil
	case *ast.LiteralNode:
		if n.Value == nil {
			return "", nil
		}
		return n.Value.Value, nil
	case *ast.IntegerNode:
		switch v := n.Value.(type) {
		case int64, uint64:
			return v, nil
		default:
			return nil, errAt(c.line(n), path, "integer %q is out of range", n.Token.Value)
		}
	case *ast.FloatNode:
		return finite(n.Value), nil
	case *ast.InfinityNode:
		return finite(n.Value), nil
	case *ast.NanNode:
		return finite(math.NaN()), nil
	case *ast.BoolNode:
		return n.Value, nil
	case *ast.TagNode:
		return c.tagged(n, path)
	case *ast.MappingNode:
		return c.mapping(n.Values, path)
	case *ast.MappingValueNode:
		return c.mapping([]*ast.MappingValueNode{n}, path)
	case *ast.SequenceNode:
		out := make([]any, 0, len(n.Values))
		for i, e := range n.Values {
			v, err := c.value(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *ast.MappingKeyNode:
		return c.value(n.Value, path)
	case *ast.DocumentNode:
		return c.value(n.Body, path)
	case *ast.CommentGroupNode, *ast.CommentNode:
		return nil, nil
	case *ast.AnchorNode, *ast.AliasNode:
		return nil, errAt(c.line(n), path, "YAML anchors and aliases are not allowed")
	default:
		return nil, errAt(c.line(n), path, "unsupported YAML node %s", n.Type())
	}
}

func (c *yamlConv) mapping(values []*ast.MappingValueNode, path string) (any, error) {
	out := make(map[string]any, len(values))
	explicit := map[string]bool{}
	var merges []map[string]any
	for _, mv := range values {
		if mv == nil {
			continue
		}
		if _, ok := mv.Key.(*ast.MergeKeyNode); ok {
			v, err := c.value(mv.Value, path)
			if err != nil {
				return nil, err
			}
			switch m := v.(type) {
			case map[string]any:
				merges = append(merges, m)
			case []any:
				for _, e := range m {
					em, ok := e.(map[string]any)
					if !ok {
						return nil, errAt(c.line(mv), joinKey(path, "<<"), "merge key value must be a mapping or a list of mappings")
					}
					merges = append(merges, em)
				}
			default:
				return nil, errAt(c.line(mv), joinKey(path, "<<"), "merge key value must be a mapping or a list of mappings")
			}
			continue
		}
		key, err := c.key(mv.Key, path)
		if err != nil {
			return nil, err
		}
		kp := joinKey(path, key)
		if explicit[key] {
			return nil, errAt(c.line(mv.Key), kp, "duplicate key %q", key)
		}
		explicit[key] = true
		c.pos[kp] = c.line(mv.Key)
		v, err := c.value(mv.Value, kp)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	for _, m := range merges {
		for k, v := range m {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	return out, nil
}

func (c *yamlConv) key(n ast.Node, path string) (string, error) {
	if mk, ok := n.(*ast.MappingKeyNode); ok {
		n = mk.Value
	}
	v, err := c.value(n, path)
	if err != nil {
		return "", err
	}
	switch k := v.(type) {
	case string:
		return k, nil
	case nonFinite:
		return string(k), nil
	case nil:
		return "null", nil
	case bool, int64, uint64, float64:
		return fmt.Sprint(k), nil
	default:
		return "", errAt(c.line(n), path, "mapping key is %s; only scalar keys are supported", kindOf(v))
	}
}

func (c *yamlConv) tagged(n *ast.TagNode, path string) (any, error) {
	tag := ""
	if n.Start != nil {
		tag = n.Start.Value
	}
	raw := func() (string, bool) {
		switch v := n.Value.(type) {
		case nil, *ast.NullNode:
			return "", true
		case *ast.LiteralNode:
			if v.Value == nil {
				return "", true
			}
			return v.Value.Value, true
		case *ast.StringNode:
			return v.Value, true
		case ast.ScalarNode:
			if tk := v.GetToken(); tk != nil {
				return tk.Value, true
			}
		}
		return "", false
	}
	switch tag {
	case "!!str", "!":
		s, ok := raw()
		if !ok {
			return nil, errAt(c.line(n), path, "!!str applied to a collection")
		}
		return s, nil
	case "!!int":
		s, _ := raw()
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil {
			return nil, errAt(c.line(n), path, "!!int value %q is not an integer", s)
		}
		return i, nil
	case "!!float":
		s, _ := raw()
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err != nil {
			switch strings.ToLower(s) {
			case ".inf", "+.inf":
				return finite(math.Inf(1)), nil
			case "-.inf":
				return finite(math.Inf(-1)), nil
			case ".nan":
				return finite(math.NaN()), nil
			}
			return nil, errAt(c.line(n), path, "!!float value %q is not a number", s)
		}
		return finite(f), nil
	case "!!bool":
		s, _ := raw()
		if b, ok := parseBoolWord(s); ok {
			return b, nil
		}
		return nil, errAt(c.line(n), path, "!!bool value %q is not a boolean", s)
	case "!!null":
		return nil, nil
	case "!!timestamp":
		s, _ := raw()
		if ts, ok := yamlTimestamp(strings.TrimSpace(s)); ok {
			return ts, nil
		}
		return nil, errAt(c.line(n), path, "!!timestamp value %q is not a timestamp", s)
	case "!!binary":
		s, ok := raw()
		if !ok {
			return nil, errAt(c.line(n), path, "!!binary applied to a collection")
		}
		return strings.Join(strings.Fields(s), ""), nil
	case "!!set":
		v, err := c.value(n.Value, path)
		if err != nil {
			return nil, err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errAt(c.line(n), path, "!!set must be a mapping of keys with null values")
		}
		keys := make([]any, 0, len(m))
		names := make([]string, 0, len(m))
		for k, e := range m {
			if e != nil {
				return nil, errAt(c.line(n), joinKey(path, k), "!!set member %q has a value", k)
			}
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			keys = append(keys, k)
		}
		return keys, nil
	case "!!map", "!!seq", "!!omap", "!!pairs":
		return c.value(n.Value, path)
	default:
		return nil, errAt(c.line(n), path, "unsupported YAML tag %s", tag)
	}
}

// parseBoolWord accepts YAML 1.2 booleans and the YAML 1.1 words
// (yes/no/on/off) that PyYAML, and so BenchFlow, reads as booleans.
func parseBoolWord(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "on", "y":
		return true, true
	case "false", "no", "off", "n":
		return false, true
	}
	return false, false
}

// nonFinite is an infinite or NaN float as the file wrote it ("inf",
// "-.inf", ".nan"). It marshals to JSON as that string; numeric keys
// refuse it by name, and env tables forward its text.
type nonFinite string

// finite keeps finite floats and turns infinities and NaN into nonFinite
// values, so every parsed value marshals to JSON.
func finite(f float64) any {
	switch {
	case math.IsInf(f, 1):
		return nonFinite(".inf")
	case math.IsInf(f, -1):
		return nonFinite("-.inf")
	case math.IsNaN(f):
		return nonFinite(".nan")
	}
	return f
}

// YAML 1.1 timestamp, as PyYAML resolves plain scalars.
var yamlTimestampRE = regexp.MustCompile(`^(\d{4})-(\d{1,2})-(\d{1,2})(?:(?:[Tt]|[ \t]+)(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d*))?(?:[ \t]*(Z|[-+]\d{1,2}(?::?\d{2})?))?)?$`)

var yamlDateRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// yamlTimestamp rewrites a YAML timestamp as an ISO-8601 string, purely
// textually (no time.Time, so the machine's time zone never enters): a date
// stays YYYY-MM-DD; a date-time becomes YYYY-MM-DDTHH:MM:SS[.frac] followed
// by Z or ±HH:MM when the scalar carries a zone, and nothing when it does
// not (as PyYAML's naive datetime.isoformat() prints it).
func yamlTimestamp(s string) (string, bool) {
	if len(s) < 8 || s[0] < '0' || s[0] > '9' {
		return "", false
	}
	m := yamlTimestampRE.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	if m[4] == "" {
		// A bare date must be YYYY-MM-DD exactly.
		if !yamlDateRE.MatchString(s) || !validDate(m[1], m[2], m[3]) {
			return "", false
		}
		return s, true
	}
	if !validDate(m[1], m[2], m[3]) {
		return "", false
	}
	hh, _ := strconv.Atoi(m[4])
	mm, _ := strconv.Atoi(m[5])
	ss, _ := strconv.Atoi(m[6])
	if hh > 23 || mm > 59 || ss > 60 {
		return "", false
	}
	y, _ := strconv.Atoi(m[1])
	mo, _ := strconv.Atoi(m[2])
	d, _ := strconv.Atoi(m[3])
	out := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", y, mo, d, hh, mm, ss)
	if m[7] != "" {
		out += "." + m[7]
	}
	switch z := m[8]; {
	case z == "":
	case z == "Z":
		out += "Z"
	default:
		sign, rest := z[:1], z[1:]
		h, mins := rest, "00"
		if i := strings.IndexByte(rest, ':'); i >= 0 {
			h, mins = rest[:i], rest[i+1:]
		} else if len(rest) > 2 {
			h, mins = rest[:len(rest)-2], rest[len(rest)-2:]
		}
		hv, _ := strconv.Atoi(h)
		mv, _ := strconv.Atoi(mins)
		if hv > 23 || mv > 59 {
			return "", false
		}
		out += fmt.Sprintf("%s%02d:%02d", sign, hv, mv)
	}
	return out, true
}

func validDate(ys, ms, ds string) bool {
	y, _ := strconv.Atoi(ys)
	m, _ := strconv.Atoi(ms)
	d, _ := strconv.Atoi(ds)
	if m < 1 || m > 12 || d < 1 {
		return false
	}
	days := [...]int{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}[m-1]
	if m == 2 && (y%4 == 0 && (y%100 != 0 || y%400 == 0)) {
		days = 29
	}
	return d <= days
}

// kindOf names a parsed value's shape for error messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, uint64, int:
		return "an integer"
	case float64:
		return "a number"
	case nonFinite:
		return "a non-finite number (" + string(v.(nonFinite)) + ")"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
