// Command weed is SeaweedFS with only what the KFP tier's S3 store runs (`weed server -filer -s3`,
// tools/cluster/kfp/object_store.py): the master, the volume server, the filer on its default
// leveldb2 store and the S3 gateway with its embedded IAM API (what KFP's multi-user sync hook mints
// per-namespace keys through), plus the standalone IAM server (`-iam`) and the WebDAV and SFTP
// gateways that `weed server` wires in. Upstream's `weed` links every command, filer store,
// notification queue, remote storage and KMS with their cloud SDKs; the patches in patches/ drop
// those from the tree this is built against (build.sh).
//
// This is upstream's weed/weed.go without what the trimmed command set has no use for: the help
// and autocomplete commands, the FUSE special case, error reports to Sentry and the web UIs'
// static files (the master's, volume server's and filer's status pages come without their
// stylesheets and scripts; the S3 and IAM APIs serve none).
package main

import (
	"embed"
	"fmt"
	"os"

	"github.com/seaweedfs/seaweedfs/weed/command"
	"github.com/seaweedfs/seaweedfs/weed/glog"
	weed_server "github.com/seaweedfs/seaweedfs/weed/server"
	"github.com/seaweedfs/seaweedfs/weed/util"
	flag "github.com/seaweedfs/seaweedfs/weed/util/fla9"
	util_http "github.com/seaweedfs/seaweedfs/weed/util/http"
)

// noStatic is an empty file system: upstream embeds weed/static, which a main in another module
// cannot, and only the web UIs' pages link to it.
var noStatic embed.FS

func init() {
	weed_server.StaticFS = noStatic
	flag.Var(&util.ConfigurationFileDirectory, "config_dir", "directory with toml configuration files")
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: weed [logging options] command [arguments]\n\nThe commands are:\n")
	for _, cmd := range command.Commands {
		fmt.Fprintf(os.Stderr, "    %-11s %s\n", cmd.Name(), cmd.Short)
	}
	fmt.Fprintf(os.Stderr, "\nThe logging options are:\n")
	flag.PrintDefaults()
	os.Exit(2)
}

func main() {
	glog.MaxSize = 1024 * 1024 * 10
	glog.MaxFileCount = 5
	flag.Usage = usage
	flag.Parse()
	args := flag.Args()
	if len(args) < 1 {
		usage()
	}
	for _, cmd := range command.Commands {
		if cmd.Name() != args[0] || cmd.Run == nil {
			continue
		}
		util_http.InitGlobalHttpClient()
		cmd.Flag.Usage = func() { cmd.Usage() } // prints the command's flags and exits 2
		_ = cmd.Flag.Parse(args[1:])            // a bad flag has already called Usage
		if !cmd.Run(cmd, cmd.Flag.Args()) {
			fmt.Fprintln(os.Stderr)
			cmd.Usage()
		}
		os.Exit(command.CommandExitStatus())
	}
	fmt.Fprintf(os.Stderr, "weed: unknown command %q: this build has only the S3 store's commands\n", args[0])
	usage()
}
