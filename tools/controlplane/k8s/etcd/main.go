// Command etcd is etcd's own server entry point, built from the pinned go.etcd.io/etcd/server/v3
// module (the etcd root module has replace directives, so `go install` cannot build it).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
