package grafana

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// token is one lexical element of a PromQL query.
type token struct {
	kind tokenKind
	text string
	pos  int
}

type tokenKind int

const (
	tokIdent    tokenKind = iota // metric, label, function or keyword
	tokNumber                    // number or duration (5m, 0.99, 1e3)
	tokString                    // "...", '...' or `...`
	tokVariable                  // a Grafana variable: $name, ${name}
	tokPunct                     // ( ) { } [ ] ,
	tokOperator                  // + - * / % ^ == != <= >= < > =~ !~ = @ :
)

// promqlFunctions are PromQL's aggregation operators and functions.
var promqlFunctions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
		abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week
		day_of_year days_in_month delta deriv exp floor histogram_quantile histogram_avg histogram_count
		histogram_sum histogram_fraction histogram_stddev histogram_stdvar double_exponential_smoothing
		holt_winters hour idelta increase irate label_replace label_join last_over_time ln log10 log2
		minute month predict_linear rate resets round scalar sgn sort sort_desc sort_by_label
		sort_by_label_desc sqrt time timestamp vector year avg_over_time min_over_time max_over_time
		sum_over_time count_over_time quantile_over_time stddev_over_time stdvar_over_time
		present_over_time mad_over_time acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh
		deg rad pi`) {
		promqlFunctions[f] = true
	}
}

// Keywords that take a parenthesised label list (by (le), on (pool)).
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// Keywords that are binary operators or modifiers.
var operatorKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
}

// lexPromQL splits a query into tokens; it fails on characters PromQL does
// not have and on unterminated strings.
func lexPromQL(q string) ([]token, error) {
	var out []token
	isIdentStart := func(c byte) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
	}
	isIdent := func(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // comment to the end of the line
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(q) && q[j] != c; j++ {
				if q[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(q) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{tokString, q[i : j+1], i})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(q) && q[j] == '{' {
				k := strings.IndexByte(q[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated variable at %d", i)
				}
				j += k + 1
			} else {
				for j < len(q) && isIdent(q[j]) {
					j++
				}
			}
			if j == i+1 {
				return nil, fmt.Errorf("lone $ at %d", i)
			}
			out = append(out, token{tokVariable, q[i:j], i})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i
			for j < len(q) && (isIdent(q[j]) || q[j] == '.') {
				j++
			}
			out = append(out, token{tokNumber, q[i:j], i})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			out = append(out, token{tokIdent, q[i:j], i})
			i = j
		case strings.IndexByte("(){}[],", c) >= 0:
			out = append(out, token{tokPunct, string(c), i})
			i++
		default:
			op := ""
			for _, o := range []string{"==", "!=", "<=", ">=", "=~", "!~", "+", "-", "*", "/", "%", "^", "<", ">", "=", "@"} {
				if strings.HasPrefix(q[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			out = append(out, token{tokOperator, op, i})
			i += len(op)
		}
	}
	return out, nil
}

// promqlMetrics returns the metric names a query selects, in order of
// appearance. It checks that (), {} and [] balance, that every identifier
// followed by ( is a PromQL function, that label lists after by, without,
// on, ignoring and group_* hold only labels, and that selectors and range
// brackets hold what PromQL allows there. It is no full parser: operands
// and operators are not checked for their order.
func promqlMetrics(q string) ([]string, error) {
	toks, err := lexPromQL(q)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("empty query")
	}
	var stack []token
	var metrics []string
	closer := map[string]string{")": "(", "}": "{", "]": "["}
	inside := func() string {
		if len(stack) == 0 {
			return ""
		}
		return stack[len(stack)-1].text
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := func() *token {
			if i+1 < len(toks) {
				return &toks[i+1]
			}
			return nil
		}
		switch inside() {
		case "{":
			// Label matchers: label op "value", separated by commas.
			switch {
			case t.kind == tokPunct && t.text == "}":
			case t.kind == tokIdent || t.kind == tokString || t.kind == tokVariable:
				continue
			case t.kind == tokOperator && slices.Contains([]string{"=", "!=", "=~", "!~"}, t.text):
				continue
			case t.kind == tokPunct && t.text == ",":
				continue
			default:
				return nil, fmt.Errorf("%q at %d does not belong in a label matcher", t.text, t.pos)
			}
		case "[":
			// A range or subquery: durations, variables and ':'.
			switch {
			case t.kind == tokPunct && t.text == "]":
			case t.kind == tokNumber || t.kind == tokVariable:
				continue
			case t.kind == tokIdent && t.text == ":":
				continue
			default:
				return nil, fmt.Errorf("%q at %d does not belong in a range", t.text, t.pos)
			}
		}
		switch t.kind {
		case tokPunct:
			switch t.text {
			case "(", "{", "[":
				stack = append(stack, t)
			case ")", "}", "]":
				if inside() != closer[t.text] {
					return nil, fmt.Errorf("%q at %d closes nothing open", t.text, t.pos)
				}
				stack = stack[:len(stack)-1]
			}
		case tokIdent:
			n := next()
			switch {
			case labelListKeywords[t.text]:
				if n == nil || n.text != "(" {
					if strings.HasPrefix(t.text, "group_") {
						continue
					}
					return nil, fmt.Errorf("%s at %d needs a label list", t.text, t.pos)
				}
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
					if toks[j].kind != tokIdent && toks[j].text != "," {
						return nil, fmt.Errorf("%q at %d in the label list of %s", toks[j].text, toks[j].pos, t.text)
					}
				}
				if j == len(toks) {
					return nil, fmt.Errorf("label list of %s at %d is not closed", t.text, t.pos)
				}
				i = j
			case operatorKeywords[t.text], t.text == "inf", t.text == "nan", t.text == "Inf", t.text == "NaN":
			case n != nil && (n.text == "(" || n.text == "by" || n.text == "without"):
				// A function call, or an aggregation with its modifier
				// first: sum by (le) (...).
				if !promqlFunctions[t.text] {
					return nil, fmt.Errorf("unknown function %s at %d", t.text, t.pos)
				}
			default:
				metrics = append(metrics, t.text)
			}
		}
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return nil, fmt.Errorf("%q at %d is never closed", top.text, top.pos)
	}
	return metrics, nil
}

func TestPromqlMetrics(t *testing.T) {
	tests := []struct {
		query   string
		want    []string
		wantErr string
	}{
		{query: `drastack_pools`, want: []string{"drastack_pools"}},
		{query: `sum by (health) (drastack_pools{driver=~"$driver", health!="Healthy"}) or vector(0)`, want: []string{"drastack_pools"}},
		{query: `histogram_quantile(0.99, sum by (le, engine) (rate(x_bucket[$__rate_interval])))`, want: []string{"x_bucket"}},
		{query: `sum(rate(a[5m])) by (le) / ignoring(le) group_left sum(b offset 1h)`, want: []string{"a", "b"}},
		{query: `max(a{state=~"unavailable_.*", x='}{'}) == 1 and on (pool) b > bool 0.5`, want: []string{"a", "b"}},
		{query: "a[1h:5m] # comment with b", want: []string{"a"}},
		{query: `topk(10, m{d=~"${driver}"})`, want: []string{"m"}},
		{query: `sum(a`, wantErr: "never closed"},
		{query: `sum(a))`, wantErr: "closes nothing open"},
		{query: `a{x="1"]`, wantErr: "does not belong in a label matcher"},
		{query: `a[5m}`, wantErr: "does not belong in a range"},
		{query: `summ by (x) (a)`, wantErr: "unknown function summ"},
		{query: `a{x="1}`, wantErr: "unterminated string"},
		{query: `summ(a)`, wantErr: "unknown function summ"},
		{query: `sum by (le + 1) (a)`, wantErr: "label list of by"},
		{query: `a{x=sum(b)}`, wantErr: "does not belong in a label matcher"},
		{query: `rate(a[b])`, wantErr: "does not belong in a range"},
		{query: `a ; b`, wantErr: "unexpected"},
		{query: ``, wantErr: "empty query"},
	}
	for _, tt := range tests {
		got, err := promqlMetrics(tt.query)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tt.query, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %q, %v; want %q", tt.query, got, err, tt.want)
		}
	}
}

func TestCheckMetric(t *testing.T) {
	names := map[string]bool{"g": true, "h_seconds": true}
	hist := map[string]bool{"h_seconds": true}
	for m, ok := range map[string]bool{
		"g": true, "h_seconds_bucket": true, "h_seconds_count": true, "h_seconds_sum": true,
		"h_seconds": false, "g_bucket": false, "other": false,
	} {
		if err := checkMetric(m, names, hist); (err == nil) != ok {
			t.Errorf("checkMetric(%s) = %v, want ok=%v", m, err, ok)
		}
	}
}
