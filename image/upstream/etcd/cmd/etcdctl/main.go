// Command etcdctl is etcd's own client main, built from the
// go.etcd.io/etcd/etcdctl/v3 module at the same version as the server.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() {
	ctlv3.MustStart()
}
