package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testenv"
	"github.com/berth-sh/berth/internal/testenv/fakenet"
)

// wsEcho is a WebSocket echo server in the Python standard library, run
// inside a sandbox.
const wsEcho = `
import socket, hashlib, base64, struct
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8001)); s.listen(5)
while True:
    c, _ = s.accept(); req = b""
    while b"\r\n\r\n" not in req: req += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in req.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    h = c.recv(2); n = h[1] & 127
    if n == 126: n = struct.unpack(">H", c.recv(2))[0]
    mask = c.recv(4); data = b""
    while len(data) < n: data += c.recv(n - len(data))
    data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    c.sendall(bytes([0x81, len(data)]) + data); c.close()
`

func TestPortProxyHTTPAndWebSocket(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{PublicPorts: []int{8000}})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, sb.ID, "sh", "-c", "mkdir -p /srv && echo served-from-sandbox > /srv/index.html && cd /srv && (python3 -m http.server 8000 >/dev/null 2>&1 &) && (python3 -c '"+strings.ReplaceAll(wsEcho, "'", `'"'"'`)+"' >/dev/null 2>&1 &)")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	get := func(url string) (int, string) {
		var resp *http.Response
		var err error
		for i := 0; i < 50; i++ { // the server is starting
			if resp, err = hc.Get(url); err == nil && resp.StatusCode != 503 && resp.StatusCode != 502 {
				break
			}
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://berth/v1/sandboxes/" + sb.ID + "/ports/8000/index.html"); code != 200 || body != "served-from-sandbox\n" {
		t.Fatalf("proxied GET: %d %q", code, body)
	}
	// WebSocket through the proxy.
	var wc *websocket.Conn
	for i := 0; i < 50; i++ {
		wc, _, err = websocket.Dial(ctx, "ws://berth/v1/sandboxes/"+sb.ID+"/ports/8001/", &websocket.DialOptions{HTTPClient: hc})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("websocket through the proxy: %v", err)
	}
	if err := wc.Write(ctx, websocket.MessageText, []byte("ping-through-berth")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := wc.Read(ctx)
	if err != nil || string(msg) != "ping-through-berth" {
		t.Fatalf("websocket echo: %q %v", msg, err)
	}
	wc.CloseNow()
	// Over TCP a key is needed, except for public ports.
	d.stop()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	d.startWith("--insecure-listen", addr)
	resp, err := http.Get("http://" + addr + "/v1/sandboxes/" + sb.ID + "/ports/8001/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("private port without a key: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + "/v1/sandboxes/" + sb.ID + "/ports/8000/index.html")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "served-from-sandbox\n" {
		t.Fatalf("public port without a key: %d %q", resp.StatusCode, b)
	}
}

// netTopo is a test-made network (fakenet): a "host" namespace the daemon
// runs in, and an "internet" namespace with test servers. Nothing routes
// off the machine: the namespaces have no other links.
type netTopo struct {
	host, inet string
	servers    []*exec.Cmd
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	fakenet.IP(t, args...)
}

// newNetTopo is fakenet's topology with the addresses the egress tests
// probe (203.0.113.10, a metadata address) and a plain HTTP server on
// 198.51.100.2:8080.
func newNetTopo(t *testing.T) *netTopo {
	f := fakenet.New(t)
	n := &netTopo{host: f.Host, inet: f.Inet}
	// Registered after fakenet's cleanup, so it runs before the
	// namespaces are deleted.
	t.Cleanup(func() {
		for _, s := range n.servers {
			s.Process.Kill()
			s.Wait()
		}
	})
	f.AddAddr(t, "203.0.113.10")
	f.AddAddr(t, "169.254.169.254")
	dir := t.TempDir()
	os.WriteFile(dir+"/index.html", []byte("hello-from-the-test-internet\n"), 0o644)
	// nsenter joins the network namespace only; ip netns exec would make a
	// mount namespace too, a copy of every mount of the host at its start,
	// held for the server's life: the storage pools of daemons that tests
	// beside this one stop meanwhile could never be released.
	srv := exec.Command("nsenter", "--net="+testenv.NetnsPath(n.inet), "python3", "-m", "http.server", "8080", "--directory", dir)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	n.servers = append(n.servers, srv)
	return n
}

func TestEgressNetwork(t *testing.T) {
	parallel(t)
	testEgressNetwork(t, "runc")
}

// TestEgressNetworkRunsc: the same policy, flow log, live rules, stop/start,
// daemon restart and isolation between sandboxes on the gVisor class,
// whose netstack serves the veth of a namespace wired before start.
func TestEgressNetworkRunsc(t *testing.T) {
	parallel(t)
	testEgressNetwork(t, "runsc")
}

// startDaemonClass starts a daemon in netns ns that must offer runtime
// class rt (runsc: a static build that passes the daemon's probe).
func startDaemonClass(t *testing.T, ns, rt string) *daemon {
	t.Helper()
	d := startDaemonIn(t, ns)
	if rt == "runc" {
		return d
	}
	rep, err := d.c.Doctor(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Runtime, rt) {
		t.Fatalf("the daemon offers no %s class (runtime %q): install it (scripts/install-runsc.sh)", rt, rep.Runtime)
	}
	return d
}

func testEgressNetwork(t *testing.T, rt string) {
	topo := newNetTopo(t)
	d := startDaemonClass(t, topo.host, rt)
	ctx := context.Background()
	fetch := func(id, url string) (string, int) {
		var out strings.Builder
		exit, err := d.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c",
			"import urllib.request,sys\ntry:\n print(urllib.request.urlopen('" + url + "', timeout=3).read().decode(), end='')\nexcept Exception as e:\n print('FAILED', type(e).__name__); sys.exit(1)"}}, &out, &out)
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		return out.String(), exit.Code
	}
	sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Persistent: true, Runtime: rt,
		Allow: []string{"tcp://198.51.100.2:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.IPv4 == "" || sb.IPv6 == "" || sb.Isolation.Runtime != rt {
		t.Fatalf("no addresses or another class: %+v", sb)
	}
	// Allowed: reachable. Not allowed: dropped, and in the flow log.
	var body string
	var code int
	for i := 0; i < 30; i++ { // the test server is starting
		if body, code = fetch(sb.ID, "http://198.51.100.2:8080/index.html"); code == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 0 || body != "hello-from-the-test-internet\n" {
		t.Fatalf("allowed destination: %q", body)
	}
	for _, url := range []string{"http://203.0.113.10:8080/", "http://169.254.169.254:8080/", "http://198.51.100.1:8080/"} {
		if out, code := fetch(sb.ID, url); code == 0 {
			t.Fatalf("%s reachable: %q", url, out)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		flows, err := d.c.Flows(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		denied, allowed := map[string]bool{}, false
		for _, f := range flows {
			if f.Decision == "deny" {
				host, _, _ := net.SplitHostPort(f.Dst)
				denied[host] = true
			}
			if f.Decision == "allow" && strings.HasPrefix(f.Dst, "198.51.100.2:") {
				allowed = true
			}
		}
		if denied["203.0.113.10"] && denied["169.254.169.254"] && allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow log lacks the attempts: %+v", flows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A rule added live takes effect without a restart.
	if _, err := d.c.UpdateNetwork(ctx, sb.ID, api.NetworkRulesRequest{Allow: []string{"203.0.113.10"}}); err != nil {
		t.Fatal(err)
	}
	if out, code := fetch(sb.ID, "http://203.0.113.10:8080/index.html"); code != 0 {
		t.Fatalf("live rule: %q", out)
	}
	// The sandbox keeps its address across stop/start.
	d.c.Stop(ctx, sb.ID)
	again, err := d.c.Start(ctx, sb.ID)
	if err != nil || again.IPv4 != sb.IPv4 || again.IPv6 != sb.IPv6 {
		t.Fatalf("address after stop/start: %+v %v (was %s)", again, err, sb.IPv4)
	}
	if out, code := fetch(sb.ID, "http://198.51.100.2:8080/index.html"); code != 0 {
		t.Fatalf("after restart: %q", out)
	}
	// And across a daemon restart: adopted with its address and rules.
	d.stop()
	d.startWithEnv()
	if got, _ := d.c.GetSandbox(ctx, sb.ID); got.IPv4 != sb.IPv4 || got.State != "running" {
		t.Fatalf("after daemon restart: %+v", got)
	}
	if out, code := fetch(sb.ID, "http://198.51.100.2:8080/index.html"); code != 0 {
		t.Fatalf("egress after daemon restart: %q", out)
	}
	if out, code := fetch(sb.ID, "http://169.254.169.254:8080/"); code == 0 {
		t.Fatalf("metadata reachable after daemon restart: %q", out)
	}
	if rt == "runsc" {
		// Hibernate and wake: the restored netstack is handed a namespace
		// wired anew, with the same address and rules.
		if _, err := d.c.Hibernate(ctx, sb.ID); err != nil {
			t.Fatalf("hibernate: %v", err)
		}
		if got, err := d.c.Wake(ctx, sb.ID); err != nil || got.IPv4 != sb.IPv4 {
			t.Fatalf("wake: %+v %v", got, err)
		}
		if out, code := fetch(sb.ID, "http://198.51.100.2:8080/index.html"); code != 0 {
			t.Fatalf("egress after wake: %q", out)
		}
		if out, code := fetch(sb.ID, "http://169.254.169.254:8080/"); code == 0 {
			t.Fatalf("metadata reachable after wake: %q", out)
		}
	}
	assertDoctorClean(t, d)
	// A second sandbox is not reachable from the first.
	other, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Runtime: rt, Allow: []string{"0.0.0.0/0"}})
	if err != nil {
		t.Fatal(err)
	}
	execOut(t, d, other.ID, "sh", "-c", "cd /tmp && (python3 -m http.server 9000 >/dev/null 2>&1 &)")
	time.Sleep(500 * time.Millisecond)
	if out, code := fetch(sb.ID, "http://"+other.IPv4+":9000/"); code == 0 {
		t.Fatalf("sandbox reached another sandbox: %q", out)
	}
	// Create/delete cycles leave no veths.
	for i := 0; i < 20; i++ {
		x, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{Network: "egress", Runtime: rt})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.DeleteSandbox(ctx, x.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	d.c.DeleteSandbox(ctx, other.ID, true)
	d.c.DeleteSandbox(ctx, sb.ID, true)
	out, _ := exec.Command("ip", "-n", topo.host, "-o", "link").Output()
	if n := strings.Count(string(out), "veth"); n != 0 {
		t.Fatalf("%d veths left:\n%s", n, out)
	}
	_ = client.IsConflict
	_ = fmt.Sprint
}
