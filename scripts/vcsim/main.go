// vcsim for bootimage-gen's tests: govmomi's own simulator (Debian's
// golang-github-vmware-govmomi-dev), a VPX model on 127.0.0.1 over TLS with a
// CA made here (so a client can verify it), and two additions for tests:
// the bytes of every NFC upload are kept under -dir/uploads/<lease>/<file>
// (this govmomi version discards them), and GET /vcsim-inventory lists the
// VMs as JSON. Prints "READY <url> <ca.pem>" and runs until SIGTERM/SIGINT
// or until its stdin closes (its parent died).
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"io/ioutil"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// makeCerts: a CA and a leaf for host (an IP or DNS name) signed by it.
func makeCerts(dir, host string) tls.Certificate {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vcsim test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDer, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDer)
	must(err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		leaf.IPAddresses = []net.IP{ip}
	} else {
		leaf.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	must(err)
	must(ioutil.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDer}), 0o644))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

type capture struct {
	next http.Handler
	dir  string
}

func (c capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/vcsim-inventory" {
		inventory(w)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/nfc/") && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
		p := strings.Split(r.URL.Path, "/")
		d := filepath.Join(c.dir, "uploads", filepath.Base(p[len(p)-2]))
		must(os.MkdirAll(d, 0o755))
		f, err := os.Create(filepath.Join(d, filepath.Base(p[len(p)-1])))
		must(err)
		defer f.Close()
		r.Body = ioutil.NopCloser(io.TeeReader(r.Body, f))
	}
	c.next.ServeHTTP(w, r)
}

type vmInfo struct {
	Name       string   `json:"name"`
	Ref        string   `json:"ref"`
	Template   bool     `json:"template"`
	Annotation string   `json:"annotation"`
	GuestId    string   `json:"guestId"`
	Version    string   `json:"version"`
	Firmware   string   `json:"firmware"`
	SecureBoot *bool    `json:"secureBoot"`
	Disks      []string `json:"disks"`
	Networks   []string `json:"networks"`
	Folder     string   `json:"folder"`
	Pool       string   `json:"pool"`
	Datastores []string `json:"datastores"`
}

func name(ref types.ManagedObjectReference) string {
	if e, ok := simulator.Map.Get(ref).(mo.Entity); ok {
		return e.Entity().Name
	}
	return ref.Value
}

func inventory(w http.ResponseWriter) {
	out := []vmInfo{}
	for _, e := range simulator.Map.All("VirtualMachine") {
		vm := e.(*simulator.VirtualMachine)
		i := vmInfo{Name: vm.Name, Ref: vm.Self.Value}
		if c := vm.Config; c != nil {
			i.Template, i.Annotation, i.GuestId, i.Version, i.Firmware = c.Template, c.Annotation, c.GuestId, c.Version, c.Firmware
			if c.BootOptions != nil {
				i.SecureBoot = c.BootOptions.EfiSecureBootEnabled
			}
			for _, d := range c.Hardware.Device {
				if disk, ok := d.(*types.VirtualDisk); ok {
					if b, ok := disk.Backing.(types.BaseVirtualDeviceFileBackingInfo); ok {
						i.Disks = append(i.Disks, b.GetVirtualDeviceFileBackingInfo().FileName)
					}
				}
			}
		}
		for _, n := range vm.Network {
			i.Networks = append(i.Networks, name(n))
		}
		for _, d := range vm.Datastore {
			i.Datastores = append(i.Datastores, name(d))
		}
		if vm.Parent != nil {
			i.Folder = name(*vm.Parent)
		}
		if vm.ResourcePool != nil {
			i.Pool = name(*vm.ResourcePool)
		}
		out = append(out, i)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func main() {
	listen := flag.String("l", "127.0.0.1:0", "listen address")
	dir := flag.String("dir", "", "state directory (ca.pem, uploads/)")
	user := flag.String("username", "user", "login user")
	pass := flag.String("password", "pass", "login password")
	certHost := flag.String("cert-host", "127.0.0.1", "the name (or IP) the server certificate is made for")
	watchStdin := flag.Bool("stdin", false, "exit when stdin closes")
	flag.Parse()
	if *dir == "" {
		log.Fatal("-dir is required")
	}
	must(os.MkdirAll(*dir, 0o755))

	model := simulator.VPX()
	model.Machine = 0
	model.Autostart = false
	defer model.Remove()
	must(model.Create())

	model.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*user, *pass)}
	model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{makeCerts(*dir, *certHost)}}
	s := model.Service.NewServer()
	defer s.Close()
	s.Server.Config.Handler = capture{next: s.Server.Config.Handler, dir: *dir}

	u := *s.URL
	u.User = nil
	fmt.Printf("READY %s %s\n", u.String(), filepath.Join(*dir, "ca.pem"))

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if *watchStdin {
		go func() {
			_, _ = io.Copy(ioutil.Discard, os.Stdin)
			sig <- syscall.SIGTERM
		}()
	}
	<-sig
}
