// Command etcdstop runs etcd and, when asked to stop, ends a follower as soon as etcd's graceful stop has nothing
// left to wait for but long-lived streams.
//
//	etcdstop -- etcd --name=... (etcd's own command line, unchanged)
//
// On SIGTERM or SIGINT etcd stops its client listener at once, answers the unary requests it holds, and then waits
// for every open stream to end: up to its request timeout (5 s + 2 election timeouts) per listener. Watch and
// lease keep-alive streams never end by themselves, so a member that any client watches on takes that whole wait
// (or the pod's grace period, whichever is shorter) to stop, where one without watchers stops in milliseconds.
//
// etcdstop forwards every signal to etcd. On the first SIGTERM or SIGINT it reads etcd's own metrics (the first
// --listen-metrics-urls, over plain HTTP) just before it forwards the signal, then every 20 ms. It kills etcd
// (SIGKILL) only when it was a follower then (etcd_server_is_leader 0: a leader must finish its stop, which hands
// leadership to another member after the wait) and, once the client port refuses connections (no new request can
// start), one of these holds:
//   - no unary or server-streaming call is in flight (grpc_server_started_total minus grpc_server_handled_total):
//     every request etcd accepted has been answered, including snapshots;
//   - the metrics listener refuses connections: etcd closes it only after its client servers have stopped, so
//     every request is answered, and what is left is raft's stop and a wait of up to 1 s for the peer connections
//     to go idle, which the other members' streams never do.
//
// What the kill skips is then only the waits for the watch and keep-alive streams and for the peers. Those clients
// reconnect to another member either way, and a follower's data is crash-safe (the WAL is synced before etcd
// acknowledges anything). When the role cannot be read, or none of the conditions comes to hold, etcd stops as it
// would without etcdstop. etcdstop exits with etcd's exit code: 0 when it killed etcd after a stop signal, 128+n when
// a signal n ended etcd.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const poll = 20 * time.Millisecond

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: etcdstop -- etcd [flags]")
		os.Exit(2)
	}
	runtime.LockOSThread()
	os.Exit(run(args))
}

// defaultPath is the search path a container gets when its image sets none (runc's and execvp's default).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func run(args []string) int {
	if os.Getenv("PATH") == "" {
		_ = os.Setenv("PATH", defaultPath)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// etcd dies with etcdstop, as the processes of a container die with its first: a SIGKILL to etcdstop (a
	// runtime that signals only the container's main process, a test's crash) must not leave etcd running on the
	// data directory. The kernel sends it when the thread that started etcd exits, so that is the main thread,
	// locked to main's goroutine for the life of the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "etcdstop: cannot start %s: %v\n", args[0], err)
		return 127
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	metrics, client := metricsURL(args), clientAddress(args)
	web := &http.Client{Timeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	killed := false
	stopping := false
	fastStop := make(chan struct{})
	for {
		select {
		case err := <-exited:
			return exitCode(err, killed)
		case sig := <-signals:
			stop := (sig == syscall.SIGTERM || sig == syscall.SIGINT) && !stopping && metrics != "" && client != ""
			follower := false
			if stop {
				// read before etcd starts its stop: without watchers its metrics listener closes within
				// milliseconds, and the role must be known by then (a busy member may take a while to answer)
				before, err := scrape(&http.Client{Timeout: time.Second}, metrics)
				follower = err == nil && before.leader == 0
				if err != nil {
					fmt.Fprintf(os.Stderr, "etcdstop: cannot read etcd's role before the stop (%v): etcd stops by itself\n", err)
				}
			}
			_ = cmd.Process.Signal(sig)
			if stop {
				stopping = true
				go func() {
					if quiet(ctx, web, metrics, client, follower) {
						close(fastStop)
					}
				}()
			}
		case <-fastStop:
			fastStop = nil
			fmt.Fprintln(os.Stderr, "etcdstop: a follower with no request in flight and its client port closed: "+
				"stopped without waiting for its streams and its peer connections")
			killed = true
			_ = cmd.Process.Kill()
		}
	}
}

// quiet polls until etcd, stopping, holds nothing but streams or the wait for its peers (see the package doc);
// false when ctx ends first, or the metrics cannot be read for another reason.
func quiet(ctx context.Context, web *http.Client, metrics, client string, follower bool) bool {
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
		if accepting(client) {
			continue
		}
		m, err := scrape(web, metrics)
		if err != nil && follower && errors.Is(err, syscall.ECONNREFUSED) {
			return true // the metrics listener closes after every client request was answered
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "etcdstop: cannot read etcd's metrics (%v): etcd stops by itself\n", err)
			return false
		}
		if !follower || m.leader != 0 {
			return false // a leader's stop hands leadership over after the wait: never cut it short
		}
		if m.inFlight == 0 {
			return true
		}
	}
}

func accepting(address string) bool {
	conn, err := net.DialTimeout("tcp", address, 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

type reading struct {
	leader   float64
	inFlight float64
}

func scrape(web *http.Client, metrics string) (reading, error) {
	resp, err := web.Get(metrics)
	if err != nil {
		return reading{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return reading{}, fmt.Errorf("%s answered %s", metrics, resp.Status)
	}
	return parse(resp.Body)
}

// parse reads the Prometheus text etcd serves: the leader gauge, and the unary and server-streaming calls started
// but not yet handled.
func parse(body io.Reader) (reading, error) {
	var r reading
	seenLeader := false
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, labels, value, ok := sample(line)
		if !ok {
			continue
		}
		switch {
		case name == "etcd_server_is_leader":
			r.leader, seenLeader = value, true
		case name == "grpc_server_started_total" && counted(labels):
			r.inFlight += value
		case name == "grpc_server_handled_total" && counted(labels):
			r.inFlight -= value
		}
	}
	if err := lines.Err(); err != nil {
		return reading{}, err
	}
	if !seenLeader {
		return reading{}, errors.New("no etcd_server_is_leader in the metrics")
	}
	return r, nil
}

func counted(labels string) bool {
	return strings.Contains(labels, `grpc_type="unary"`) || strings.Contains(labels, `grpc_type="server_stream"`)
}

// sample splits `name{labels} value` (labels may be absent); a timestamp after the value is ignored.
func sample(line string) (name, labels string, value float64, ok bool) {
	name, rest, _ := strings.Cut(line, " ")
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// metricsURL is the first --listen-metrics-urls, on loopback when it listens on every address; "" without one.
func metricsURL(args []string) string {
	raw := flagValue(args, "listen-metrics-urls")
	if raw == "" {
		return ""
	}
	u, err := url.Parse(strings.Split(raw, ",")[0])
	if err != nil || u.Scheme != "http" {
		return "" // a TLS metrics listener would need the member's client certificate: not read
	}
	return "http://" + loopback(u.Host) + "/metrics"
}

// clientAddress is the host:port of the first --listen-client-urls, on loopback when it listens on every address.
func clientAddress(args []string) string {
	raw := flagValue(args, "listen-client-urls")
	if raw == "" {
		return ""
	}
	u, err := url.Parse(strings.Split(raw, ",")[0])
	if err != nil {
		return ""
	}
	return loopback(u.Host)
}

func loopback(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	if host == "" || host == "0.0.0.0" || host == "::" || host == "[::]" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// flagValue is the value of --name=value or --name value (etcd also accepts a single dash).
func flagValue(args []string, name string) string {
	for i, a := range args {
		for _, prefix := range []string{"--" + name, "-" + name} {
			if a == prefix && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, prefix+"="); ok {
				return v
			}
		}
	}
	return ""
}

func exitCode(err error, killed bool) int {
	if err == nil {
		return 0
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 1
	}
	if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		if killed && status.Signal() == syscall.SIGKILL {
			return 0
		}
		return 128 + int(status.Signal())
	}
	return exit.ExitCode()
}
