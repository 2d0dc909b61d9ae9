// lincheck: is a history of etcd client operations linearizable? It reads the history e2e/history.py records (JSON),
// checks it with porcupine against a model of etcd's key-value store, prints a JSON report on stdout and, when the
// history is not linearizable (or the check ran out of time), writes porcupine's HTML visualisation.
//
//	lincheck -history history.json [-visualization report.html] [-timeout 60s]
//
// Exit status: 0 linearizable, 1 not (the report says why), 2 unusable input, 3 undecided within the timeout.
//
// The model (docs/decisions.md D36.1 says why it is ours and not etcd's robustness model): every key is its own
// register, checked in its own partition (linearizability is compositional), holding a value and the revision it
// was written at. Writes we do not make ourselves (the live writer, the operator) share the cluster's revision
// counter, so a revision is never predicted, only bounded: a write takes a revision above every revision seen
// before it, a read answers at a revision no lower. Across keys, one more check outside porcupine: an operation
// that started after another returned never answers with a lower revision, and a write never with the same one.
//
// An operation whose outcome is unknown (a timeout, an unavailable member) is a write that may take effect at any
// time after its call: its return time is infinity, as etcd's robustness tests model it (porcupine may then place it
// anywhere after its call, the very end included, where it changes nothing any operation saw). A read whose outcome
// is unknown changes nothing and constrains nothing.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one record of the history (the JSON e2e/history.py writes; see its Operation).
type Op struct {
	Client  int    `json:"client"`
	Kind    string `json:"kind"` // put | get | txn
	Key     string `json:"key"`
	Value   string `json:"value,omitempty"`  // put, txn: what is written
	Expect  int64  `json:"expect,omitempty"` // txn: the mod revision compared (0: the key is absent)
	Call    int64  `json:"call"`             // monotonic ns
	Return  *int64 `json:"return"`           // monotonic ns; ignored for a write whose outcome is unknown
	Outcome string `json:"outcome"`          // ok | unknown
	// A known outcome: the response header's revision; txn: whether the comparison held; get, and txn that did not
	// hold (its else branch reads the key): what the key held.
	Revision    int64  `json:"revision,omitempty"`
	Succeeded   bool   `json:"succeeded,omitempty"`
	Found       bool   `json:"found,omitempty"`
	ReadValue   string `json:"read_value,omitempty"`
	ModRevision int64  `json:"mod_revision,omitempty"`
	Member      string `json:"member,omitempty"`
	Error       string `json:"error,omitempty"`
}

type history struct {
	Operations []Op `json:"operations"`
}

func (o *Op) write() bool { return o.Kind == "put" || o.Kind == "txn" }
func (o *Op) known() bool { return o.Outcome == "ok" }
func (o *Op) changed() bool {
	return o.known() && (o.Kind == "put" || (o.Kind == "txn" && o.Succeeded))
}

func (o *Op) validate(i int) error {
	switch {
	case o.Kind != "put" && o.Kind != "get" && o.Kind != "txn":
		return fmt.Errorf("operation %d: kind %q is not put, get or txn", i, o.Kind)
	case o.Outcome != "ok" && o.Outcome != "unknown":
		return fmt.Errorf("operation %d: outcome %q is not ok or unknown", i, o.Outcome)
	case o.Key == "":
		return fmt.Errorf("operation %d: no key", i)
	case o.Return == nil && !(o.write() && o.Outcome == "unknown"):
		return fmt.Errorf("operation %d: no return time (only a write whose outcome is unknown may lack one)", i)
	case o.Return != nil && *o.Return < o.Call:
		return fmt.Errorf("operation %d: returns (%d) before its call (%d)", i, *o.Return, o.Call)
	case o.known() && o.Revision <= 0:
		return fmt.Errorf("operation %d: a known outcome needs the response's revision", i)
	}
	return nil
}

// keyState is one key as the linearization so far has it. Comparable (porcupine merges equal states with ==).
type keyState struct {
	Present bool
	Value   string
	ModRev  int64 // 0 while unknown: written by an operation whose outcome is unknown, not read since
	ModLo   int64 // ModRev unknown: that write took effect at a revision above ModLo
	Rev     int64 // the cluster's revision is at least this here
}

// canHaveMod: can the key's mod revision be m, on an answer at revision atMost? The state with it pinned.
func canHaveMod(s keyState, m, atMost int64) (keyState, bool) {
	if s.ModRev != 0 {
		return s, s.ModRev == m
	}
	if m > s.ModLo && m <= atMost {
		s.ModRev = m
		return s, true
	}
	return s, false
}

// read: the key was read at revision rev and held (found, value, mod).
func read(s keyState, rev int64, found bool, value string, mod int64) (keyState, bool) {
	if rev < s.Rev || mod > rev {
		return s, false
	}
	if !found {
		if s.Present {
			return s, false
		}
		s.Rev = rev
		return s, true
	}
	if !s.Present || s.Value != value {
		return s, false
	}
	s, ok := canHaveMod(s, mod, rev)
	s.Rev = rev
	return s, ok
}

func written(value string, rev int64) keyState {
	return keyState{Present: true, Value: value, ModRev: rev, ModLo: 0, Rev: rev}
}

func writtenUnknown(s keyState, value string) keyState {
	return keyState{Present: true, Value: value, ModRev: 0, ModLo: s.Rev, Rev: s.Rev + 1}
}

// compare: can "mod_revision(key) == expect" hold in s, and can it fail?
func compare(s keyState, expect int64) (canHold, canFail bool) {
	switch {
	case !s.Present:
		return expect == 0, expect != 0
	case s.ModRev != 0:
		return s.ModRev == expect, s.ModRev != expect
	default: // unknown, above ModLo
		return expect > s.ModLo, true
	}
}

func step(state, input, _ interface{}) []interface{} {
	s := state.(keyState)
	o := input.(*Op)
	var next []interface{}
	switch {
	case o.Kind == "get" && !o.known():
		next = append(next, s)
	case o.Kind == "get":
		if t, ok := read(s, o.Revision, o.Found, o.ReadValue, o.ModRevision); ok {
			next = append(next, t)
		}
	case o.Kind == "put" && !o.known():
		next = append(next, writtenUnknown(s, o.Value))
	case o.Kind == "put":
		if o.Revision > s.Rev {
			next = append(next, written(o.Value, o.Revision))
		}
	case o.Kind == "txn" && !o.known():
		canHold, canFail := compare(s, o.Expect)
		if canHold {
			next = append(next, writtenUnknown(s, o.Value))
		}
		if canFail {
			next = append(next, s)
		}
	case o.Kind == "txn" && o.Succeeded:
		if o.Revision <= s.Rev {
			break
		}
		if o.Expect == 0 {
			if !s.Present {
				next = append(next, written(o.Value, o.Revision))
			}
		} else if _, ok := canHaveMod(s, o.Expect, o.Revision-1); ok && s.Present {
			next = append(next, written(o.Value, o.Revision))
		}
	default: // a txn whose comparison failed: its else branch read the key
		if (o.Found && o.ModRevision == o.Expect) || (!o.Found && o.Expect == 0) {
			break // the answer contradicts itself
		}
		if t, ok := read(s, o.Revision, o.Found, o.ReadValue, o.ModRevision); ok {
			next = append(next, t)
		}
	}
	return next
}

func describeOp(input, _ interface{}) string {
	o := input.(*Op)
	var call string
	switch o.Kind {
	case "put":
		call = fmt.Sprintf("put(%s, %s)", o.Key, o.Value)
	case "get":
		call = fmt.Sprintf("get(%s)", o.Key)
	default:
		call = fmt.Sprintf("txn(mod(%s)==%d ? put %s)", o.Key, o.Expect, o.Value)
	}
	var got string
	switch {
	case !o.known():
		got = "unknown"
		if o.Error != "" {
			got += " (" + o.Error + ")"
		}
	case o.Kind == "put":
		got = fmt.Sprintf("rev %d", o.Revision)
	case o.Kind == "txn" && o.Succeeded:
		got = fmt.Sprintf("held, rev %d", o.Revision)
	default:
		held := "absent"
		if o.Found {
			held = fmt.Sprintf("%s@%d", o.ReadValue, o.ModRevision)
		}
		if o.Kind == "txn" {
			held = "failed, " + held
		}
		got = fmt.Sprintf("%s (rev %d)", held, o.Revision)
	}
	return call + " -> " + got
}

func describeState(state interface{}) string {
	s := state.(keyState)
	if !s.Present {
		return fmt.Sprintf("absent, rev>=%d", s.Rev)
	}
	if s.ModRev == 0 {
		return fmt.Sprintf("%s@(>%d), rev>=%d", s.Value, s.ModLo, s.Rev)
	}
	return fmt.Sprintf("%s@%d, rev>=%d", s.Value, s.ModRev, s.Rev)
}

func partition(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range ops {
		k := op.Input.(*Op).Key
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

var model = (&porcupine.NondeterministicModel{
	Partition:                 partition,
	Init:                      func() []interface{} { return []interface{}{keyState{}} },
	Step:                      step,
	DescribeOperation:         describeOp,
	DescribeState:             describeState,
	DescribeOperationMetadata: func(info interface{}) string { s, _ := info.(string); return s },
}).ToModel()

// operations: the history as porcupine takes it. A write whose outcome is unknown returns after everything else
// (etcd's robustness tests: the last observed time + 1 s), in a lane of its own in the visualisation, as do the later
// operations of its client (they overlap it).
func operations(ops []Op) []porcupine.Operation {
	var last int64
	for i := range ops {
		if ops[i].Return != nil && *ops[i].Return > last {
			last = *ops[i].Return
		}
		if ops[i].Call > last {
			last = ops[i].Call
		}
	}
	infinity := last + time.Second.Nanoseconds()
	lanes := map[int]int{}
	next := 0
	lane := func(client int) int {
		l, ok := lanes[client]
		if !ok {
			l, next = next, next+1
			lanes[client] = l
		}
		return l
	}
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ops[order[a]].Call < ops[order[b]].Call })
	out := make([]porcupine.Operation, 0, len(ops))
	for _, i := range order {
		o := &ops[i]
		ret := infinity
		if o.Return != nil && (o.known() || !o.write()) {
			ret = *o.Return
		}
		meta := fmt.Sprintf("client %d", o.Client)
		if o.Member != "" {
			meta += " via " + o.Member
		}
		if o.Error != "" {
			meta += ": " + o.Error
		}
		out = append(out, porcupine.Operation{
			ClientId: lane(o.Client), Input: o, Output: o, Call: o.Call, Return: ret, Metadata: meta,
		})
		if o.write() && !o.known() {
			lanes[o.Client] = next // later operations of this client overlap this one: another lane
			next++
		}
	}
	return out
}

// revisionOrder: across keys, an operation that started after another returned never answers with a lower
// revision, and a write that changed a key never with the same one; no two writes share a revision.
func revisionOrder(ops []Op) []string {
	var known []*Op
	for i := range ops {
		if ops[i].known() {
			known = append(known, &ops[i])
		}
	}
	byCall := append([]*Op(nil), known...)
	sort.SliceStable(byCall, func(a, b int) bool { return byCall[a].Call < byCall[b].Call })
	byReturn := append([]*Op(nil), known...)
	sort.SliceStable(byReturn, func(a, b int) bool { return *byReturn[a].Return < *byReturn[b].Return })
	var problems []string
	var before *Op // the returned operation with the highest revision so far
	j := 0
	for _, o := range byCall {
		for j < len(byReturn) && *byReturn[j].Return < o.Call {
			if before == nil || byReturn[j].Revision > before.Revision {
				before = byReturn[j]
			}
			j++
		}
		if before == nil {
			continue
		}
		if o.Revision < before.Revision || (o.changed() && o.Revision == before.Revision) {
			problems = append(problems, fmt.Sprintf("revision went back: %s [client %d] answered at revision %d "+
				"after %s [client %d] had returned at revision %d", describeOp(o, o), o.Client, o.Revision,
				describeOp(before, before), before.Client, before.Revision))
		}
	}
	writers := map[int64]*Op{}
	for _, o := range known {
		if !o.changed() {
			continue
		}
		if other, dup := writers[o.Revision]; dup {
			problems = append(problems, fmt.Sprintf("two writes at revision %d: %s [client %d] and %s [client %d]",
				o.Revision, describeOp(other, other), other.Client, describeOp(o, o), o.Client))
		}
		writers[o.Revision] = o
	}
	return problems
}

type report struct {
	Verdict       string   `json:"verdict"` // linearizable | not linearizable | undecided
	Operations    int      `json:"operations"`
	Unknown       int      `json:"unknown"`
	Keys          int      `json:"keys"`
	Seconds       float64  `json:"seconds"`
	Problems      []string `json:"problems"`
	Visualization string   `json:"visualization,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	path := flags.String("history", "", "the history (JSON, as e2e/history.py writes it)")
	viz := flags.String("visualization", "", "where to write porcupine's HTML visualisation when the check fails")
	timeout := flags.Duration("timeout", time.Minute, "give up (exit 3) after this long")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "lincheck: -history FILE is required")
		return 2
	}
	raw, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %v\n", err)
		return 2
	}
	var h history
	if err := json.Unmarshal(raw, &h); err != nil {
		fmt.Fprintf(stderr, "lincheck: %s is not a history: %v\n", *path, err)
		return 2
	}
	rep := report{Operations: len(h.Operations), Problems: []string{}}
	keys := map[string]bool{}
	for i := range h.Operations {
		o := &h.Operations[i]
		if err := o.validate(i); err != nil {
			fmt.Fprintf(stderr, "lincheck: %s: %v\n", *path, err)
			return 2
		}
		keys[o.Key] = true
		if !o.known() {
			rep.Unknown++
		}
	}
	rep.Keys = len(keys)
	started := time.Now()
	result, info := porcupine.CheckOperationsVerbose(model, operations(h.Operations), *timeout)
	rep.Problems = append(rep.Problems, revisionOrder(h.Operations)...)
	rep.Seconds = math.Round(time.Since(started).Seconds()*1000) / 1000
	code := 0
	switch {
	case result == porcupine.Illegal:
		rep.Verdict = "not linearizable"
		rep.Problems = append([]string{"no linearization of some key's operations fits the model (see the " +
			"visualisation: the longest partial linearization and the operation that cannot follow it)"},
			rep.Problems...)
		code = 1
	case len(rep.Problems) > 0:
		rep.Verdict = "not linearizable"
		code = 1
	case result == porcupine.Unknown:
		rep.Verdict = "undecided"
		rep.Problems = append(rep.Problems, fmt.Sprintf("no verdict within %s", *timeout))
		code = 3
	default:
		rep.Verdict = "linearizable"
	}
	if code != 0 && *viz != "" {
		if err := porcupine.VisualizePath(model, info, *viz); err != nil {
			fmt.Fprintf(stderr, "lincheck: writing the visualisation: %v\n", err)
		} else {
			rep.Visualization = *viz
		}
	}
	out, _ := json.Marshal(rep)
	fmt.Fprintln(stdout, string(out))
	if code != 0 {
		fmt.Fprintf(stderr, "lincheck: %s: %s (%d operations, %d of unknown outcome, %d keys): %s\n", *path,
			rep.Verdict, rep.Operations, rep.Unknown, rep.Keys, strings.Join(rep.Problems, "; "))
	}
	return code
}

func main() {
	if code := run(os.Args[1:], os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
}
