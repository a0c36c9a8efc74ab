// Command etcd is upstream's etcd binary: the same entry point as
// go.etcd.io/etcd/v3's main.go, buildable here without that module's
// replace directives to sibling paths.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
