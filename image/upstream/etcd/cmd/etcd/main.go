// Command etcd is etcd's own server main, built from the go.etcd.io/etcd/server/v3
// module at the version image/upstream/versions.ts names.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
