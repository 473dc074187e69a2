package main

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The headers a forging pod would send, in the spellings a server might treat apart.
var forged = []string{"kubeflow-userid", "KUBEFLOW-USERID", "Kubeflow-Userid", "kUbEfLoW-uSeRiD"}

// stripList is what main builds from `--strip-header x-ui-user`.
var stripList = []string{"x-ui-user", defaultStrip}

// serveProxy starts the proxy as main does, on a loopback port, and returns its address.
func serveProxy(t *testing.T, upstream string, h2 bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(newProxy(upstream, h2, stripList))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// assertStripped fails if a stripped header reached the upstream, and checks Authorization did.
func assertStripped(t *testing.T, got http.Header) {
	t.Helper()
	for key, values := range got {
		for _, name := range stripList {
			if strings.EqualFold(key, name) {
				t.Errorf("the upstream got %s: %q", key, values)
			}
		}
	}
	if auth := got.Get("Authorization"); auth != "Bearer pod-token" {
		t.Errorf("Authorization at the upstream = %q, want it untouched (%q)", auth, "Bearer pod-token")
	}
	if other := got.Get("X-Kept"); other != "yes" {
		t.Errorf("X-Kept at the upstream = %q, want %q: only the named headers go", other, "yes")
	}
}

// REST over HTTP/1.1, written byte by byte so the header's case on the wire is the forger's, with a
// chunked body whose trailer carries the header too.
func TestHTTP1ForgedHeaderNeverReachesUpstream(t *testing.T) {
	seen := make(chan http.Header, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // trailers are known once the body is read
		all := r.Header.Clone()
		for k, v := range r.Trailer {
			all[k] = v
		}
		seen <- all
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write(append([]byte("echo:"), body...))
	}))
	defer upstream.Close()
	proxy := serveProxy(t, upstream.Listener.Addr().String(), false)

	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "POST /apis/v2beta1/runs HTTP/1.1\r\nHost: ml-pipeline\r\nAuthorization: Bearer pod-token\r\nX-Kept: yes\r\n" +
		"X-UI-User: bob@example.com\r\n"
	for _, name := range forged {
		req += name + ": bob@example.com\r\n"
	}
	req += "Transfer-Encoding: chunked\r\nTrailer: Kubeflow-Userid\r\n\r\n" +
		"5\r\nhello\r\n0\r\nKubeflow-Userid: bob@example.com\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || string(body) != "echo:hello" {
		t.Errorf("through the proxy: %d %q, want the upstream's 403 %q", resp.StatusCode, body, "echo:hello")
	}
	assertStripped(t, <-seen)
}

// gRPC over cleartext HTTP/2: a bidirectional stream of length-prefixed messages, metadata as
// HTTP/2 headers and the status in trailers, as grpc-go speaks it. Each reply is read before the
// next message is sent, so a proxy that buffered either direction would never finish.
func TestGRPCForgedMetadataNeverReachesUpstream(t *testing.T) {
	seen := make(chan http.Header, 1)
	upstreamSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("the upstream got HTTP/%d.%d, want HTTP/2 as gRPC needs", r.ProtoMajor, r.ProtoMinor)
		}
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			msg, err := readMessage(r.Body)
			if err != nil {
				break
			}
			_, _ = w.Write(frame(append([]byte("echo:"), msg...)))
			w.(http.Flusher).Flush()
		}
		w.Header().Set("Grpc-Status", "7") // PERMISSION_DENIED, as the API server's SAR answers
		w.Header().Set("Grpc-Message", "denied")
	})}
	upstreamSrv.Protocols = new(http.Protocols)
	upstreamSrv.Protocols.SetUnencryptedHTTP2(true) // no HTTP/1: a gRPC server's own stance
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = upstreamSrv.Serve(ln) }()
	defer upstreamSrv.Close()
	proxy := serveProxy(t, ln.Addr().String(), true)

	transport := &http.Transport{Protocols: new(http.Protocols)}
	transport.Protocols.SetUnencryptedHTTP2(true)
	defer transport.CloseIdleConnections()
	bodyR, bodyW := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, "http://"+proxy+"/api.v2beta1.RunService/ListRuns", bodyR)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Authorization", "Bearer pod-token")
	req.Header.Set("X-Kept", "yes")
	req.Header.Set("X-UI-User", "bob@example.com")
	for _, name := range forged {
		req.Header[name] = []string{"bob@example.com"} // HTTP/2 lower-cases names on the wire
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, msg := range []string{"one", "two"} {
		if _, err := bodyW.Write(frame([]byte(msg))); err != nil {
			t.Fatal(err)
		}
		got, err := readMessage(resp.Body)
		if err != nil || string(got) != "echo:"+msg {
			t.Fatalf("streamed reply to %q: %q, %v", msg, got, err)
		}
	}
	_ = bodyW.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Trailer.Get("Grpc-Status") != "7" || resp.Trailer.Get("Grpc-Message") != "denied" {
		t.Errorf("through the proxy: %d, trailers %v; want the upstream's 200 with grpc-status 7", resp.StatusCode, resp.Trailer)
	}
	assertStripped(t, <-seen)
}

func frame(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg)) // gRPC: a compression flag, a 4-byte length, the message
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

func readMessage(r io.Reader) ([]byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func TestEmptyStripHeaderIsRefused(t *testing.T) {
	var n names
	if err := n.Set(" "); err == nil {
		t.Error("--strip-header ' ' was accepted; an empty name strips nothing and hides a typo")
	}
}
