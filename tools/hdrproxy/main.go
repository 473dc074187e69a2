// Command hdrproxy is the pod-facing entry to the KFP API server in the multi-user tier
// (docs/design/multi-user.md, "Identity flows"). The API server trusts a `kubeflow-userid` header
// as the caller's identity, which only the user-facing entry (oauth2-proxy) may set; a pod must
// prove who it is with a service-account token instead. So this proxy deletes that header (and any
// other named by --strip-header, such as the UI's configured name) from every request, in any
// letter case, and passes everything else through untouched: `Authorization`, bodies, streams,
// trailers and the upstream's status.
//
// Two listeners: one for the REST API (upstream over HTTP/1.1) and one for gRPC (upstream over
// HTTP/2 without TLS, where gRPC metadata are HTTP/2 headers). It uses only the standard library:
// net/http speaks unencrypted HTTP/2 itself since Go 1.24, so nothing is compiled beyond this package.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"
)

// defaultStrip is the header KFP's API server takes the user from (KUBEFLOW_USERID_HEADER's default).
const defaultStrip = "kubeflow-userid"

// names collects the repeatable --strip-header flag.
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("a header name cannot be empty")
	}
	*n = append(*n, v)
	return nil
}

// strip deletes every key equal to one of strip, ignoring case: the servers canonicalize what they
// parse, but comparing without case leaves no spelling that could slip past.
func strip(h http.Header, strip []string) {
	for key := range h {
		for _, name := range strip {
			if strings.EqualFold(key, name) {
				delete(h, key)
			}
		}
	}
}

// newProxy forwards to upstream (host:port) over HTTP/1.1, or with h2 over cleartext HTTP/2 as a
// gRPC server needs, without the stripped headers in the request's headers or trailers.
func newProxy(upstream string, h2 bool, stripped []string) *httputil.ReverseProxy {
	target := &url.URL{Scheme: "http", Host: upstream}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if h2 {
		transport.Protocols = new(http.Protocols)
		transport.Protocols.SetUnencryptedHTTP2(true)
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			strip(pr.Out.Header, stripped)
			strip(pr.Out.Trailer, stripped)
		},
		Transport: transport,
		// Flush every write at once: gRPC streams and watch-style responses must not wait in a buffer.
		FlushInterval: -1,
	}
}

// newServer accepts HTTP/1.1 and HTTP/2 with prior knowledge (what gRPC clients speak in cleartext).
func newServer(handler http.Handler) *http.Server {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

func main() {
	var stripped names
	listenHTTP := flag.String("listen-http", "", "address for the REST listener (host:port)")
	upstreamHTTP := flag.String("upstream-http", "", "the REST API server, over HTTP/1.1 (host:port)")
	listenGRPC := flag.String("listen-grpc", "", "address for the gRPC listener (host:port)")
	upstreamGRPC := flag.String("upstream-grpc", "", "the gRPC API server, over cleartext HTTP/2 (host:port)")
	flag.Var(&stripped, "strip-header", "another header to delete besides "+defaultStrip+" (repeatable)")
	flag.Parse()
	stripped = append(stripped, defaultStrip)
	pairs := []struct {
		name, listen, upstream string
		h2                     bool
	}{{"http", *listenHTTP, *upstreamHTTP, false}, {"grpc", *listenGRPC, *upstreamGRPC, true}}
	errs := make(chan error, len(pairs))
	started := 0
	for _, p := range pairs {
		if (p.listen == "") != (p.upstream == "") {
			fmt.Fprintf(os.Stderr, "hdrproxy: --listen-%s and --upstream-%s go together (got %q and %q)\n",
				p.name, p.name, p.listen, p.upstream)
			os.Exit(2)
		}
		if p.listen == "" {
			continue
		}
		// Listen before serving, so a busy or wrong address fails the start rather than later.
		ln, err := net.Listen("tcp", p.listen)
		if err != nil {
			log.Fatalf("hdrproxy: --listen-%s: %v", p.name, err)
		}
		log.Printf("hdrproxy: %s %s -> %s, deleting %s", p.name, ln.Addr(), p.upstream, stripped.String())
		srv := newServer(newProxy(p.upstream, p.h2, stripped))
		go func() { errs <- srv.Serve(ln) }()
		started++
	}
	if started == 0 {
		fmt.Fprintln(os.Stderr, "hdrproxy: nothing to do: give --listen-http/--upstream-http, --listen-grpc/--upstream-grpc or both")
		os.Exit(2)
	}
	log.Fatalf("hdrproxy: %v", <-errs)
}
