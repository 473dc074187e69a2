// Command coredns is CoreDNS v1.15 with only the plugins the node's Corefile uses
// (tools/cluster/node_config.py corefile): CoreDNS's own main links every plugin it ships, the
// cloud DNS providers' SDKs (AWS, Azure, Google) and the tracers included, which is most of its
// compile time and nothing the node needs.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

// The order a server block runs its plugins in: these plugins' relative order in CoreDNS's
// plugin.cfg, which its own build generates dnsserver.Directives from.
var directives = []string{"bind", "health", "errors", "cache", "kubernetes", "forward"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
