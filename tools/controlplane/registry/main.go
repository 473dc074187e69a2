// Command registry is distribution's registry with only what the node's image registry uses: the
// filesystem storage driver, no auth, no cloud drivers (upstream's cmd/registry links Azure, GCS,
// S3 and CloudFront too: 792 packages against 372). registry.RootCmd holds `serve` and
// `garbage-collect`, the two commands tools/cluster/node.py runs.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
