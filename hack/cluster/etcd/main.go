// Command etcd is etcd's server (etcdmain.Main) built from the module proxy
// at the version go.mod pins: the cluster's only datastore.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
