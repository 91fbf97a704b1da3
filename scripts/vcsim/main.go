// vcsim for bootimage-gen's tests: govmomi's own simulator (Debian's
// golang-github-vmware-govmomi-dev), a VPX model on 127.0.0.1 over TLS with a
// CA made here (so a client can verify it), and two additions for tests:
// the bytes of every NFC upload are kept under -dir/uploads/<lease>/<file>
// (this govmomi version discards them), and GET /vcsim-inventory lists the
// VMs as JSON. Prints "READY <url> <ca.pem>" and runs until SIGTERM/SIGINT
// or until its stdin closes (its parent died).
//
// TLS variants (issue 43): -tls-mode self-signed serves a certificate of the
// shape of current vcsim's default (self-signed, CA:TRUE, O=Acme Co, RSA
// 2048, for 127.0.0.1, ::1 and example.com), expired the same shape out of
// date, builtin this govmomi's own built-in one (RSA 1024); -tls-cert and
// -tls-key serve given files. READY then names the served certificate
// instead of ca.pem. -esx adds an "ESXi host": a second listener on
// 127.0.0.1 with its own self-signed certificate, to which the NFC device
// URLs point, with its SHA-1 thumbprint as their sslThumbprint (or
// -esx-lease-thumbprint: none, or a given value); READY then also prints
// "<esx host:port> <esx thumbprint>".
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
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

// selfSigned: a self-signed certificate for 127.0.0.1 (and, for the
// vcsim-default shape, ::1 and example.com), written to dir/name.
func selfSigned(dir, name string, tmpl *x509.Certificate, pub, priv interface{}) tls.Certificate {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	must(err)
	must(ioutil.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}

// vcsimDefault: the shape of current vcsim's built-in certificate
// (govmomi simulator/internal/testcert.go: generate_cert.go --rsa-bits
// 2048 --host 127.0.0.1,::1,example.com --ca), made here; notAfter in the
// past when expired.
func vcsimDefault(dir string, expired bool) tls.Certificate {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	must(err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	must(err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"Acme Co"}},
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Date(2084, 1, 29, 16, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		DNSNames:              []string{"example.com"},
	}
	if expired {
		tmpl.NotBefore = time.Now().Add(-48 * time.Hour)
		tmpl.NotAfter = time.Now().Add(-24 * time.Hour)
	}
	return selfSigned(dir, "server.pem", tmpl, &key.PublicKey, key)
}

// esxCert: the "ESXi host"'s own self-signed certificate.
func esxCert(dir string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "esx-sim.local"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"esx-sim.local"},
	}
	return selfSigned(dir, "esx.pem", tmpl, &key.PublicKey, key)
}

// thumbprint: govc's SHA-1 thumbprint of a DER certificate.
func thumbprint(der []byte) string {
	sum := sha1.Sum(der)
	hex := make([]string, len(sum))
	for i, b := range sum {
		hex[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(hex, ":")
}

// buffered: a response kept to be rewritten before it is sent.
type buffered struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (b *buffered) Header() http.Header         { return b.h }
func (b *buffered) WriteHeader(code int)        { b.code = code }
func (b *buffered) Write(p []byte) (int, error) { return b.body.Write(p) }

type capture struct {
	next http.Handler
	dir  string
	// rewrite, when set, is applied to every SOAP response (the NFC
	// device URLs and their sslThumbprint).
	rewrite func([]byte) []byte
}

func (c capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/vcsim-inventory" {
		inventory(w)
		return
	}
	if c.rewrite != nil && r.URL.Path == "/sdk" {
		b := &buffered{h: http.Header{}, code: http.StatusOK}
		c.next.ServeHTTP(b, r)
		out := c.rewrite(b.body.Bytes())
		for k, v := range b.h {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(b.code)
		_, _ = w.Write(out)
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
	tlsMode := flag.String("tls-mode", "ca", "server certificate: ca (a leaf of a CA made here), self-signed (current vcsim's default shape), expired, builtin (this simulator's own)")
	tlsCert := flag.String("tls-cert", "", "serve this PEM certificate (with -tls-key) instead")
	tlsKey := flag.String("tls-key", "", "the PEM key of -tls-cert")
	esx := flag.Bool("esx", false, "serve NFC from a second listener, an ESXi host with its own self-signed certificate")
	esxLeaseThumbprint := flag.String("esx-lease-thumbprint", "real", "the sslThumbprint of the NFC device URLs: real, none, or a value")
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
	trustFile := filepath.Join(*dir, "ca.pem")
	switch {
	case *tlsCert != "":
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		must(err)
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		trustFile = *tlsCert
	case *tlsMode == "ca":
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{makeCerts(*dir, *certHost)}}
	case *tlsMode == "self-signed" || *tlsMode == "expired":
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{vcsimDefault(*dir, *tlsMode == "expired")}}
		trustFile = filepath.Join(*dir, "server.pem")
	case *tlsMode == "builtin":
		// No certificate: the simulator's server uses its built-in one.
		model.Service.TLS = &tls.Config{}
		trustFile = filepath.Join(*dir, "server.pem")
	default:
		log.Fatalf("-tls-mode %q: not ca, self-signed, expired or builtin", *tlsMode)
	}
	s := model.Service.NewServer()
	defer s.Close()
	if *tlsMode == "builtin" && *tlsCert == "" {
		der := s.Server.TLS.Certificates[0].Certificate[0]
		must(ioutil.WriteFile(trustFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	}
	sim := s.Server.Config.Handler
	front := capture{next: sim, dir: *dir}
	esxInfo := ""
	if *esx {
		cert := esxCert(*dir)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(err)
		defer ln.Close()
		esxHandler := capture{next: sim, dir: *dir}
		go func() {
			_ = http.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				log.Printf("esx %s %s", r.Method, r.URL.Path)
				esxHandler.ServeHTTP(w, r)
			}))
		}()
		addr := ln.Addr().String()
		tp := thumbprint(cert.Certificate[0])
		esxInfo = " " + addr + " " + tp
		lease := tp
		switch *esxLeaseThumbprint {
		case "real":
		case "none":
			lease = ""
		default:
			lease = *esxLeaseThumbprint
		}
		front.rewrite = func(b []byte) []byte {
			b = bytes.ReplaceAll(b, []byte("<url>https://*/nfc/"), []byte("<url>https://"+addr+"/nfc/"))
			return bytes.ReplaceAll(b, []byte("<sslThumbprint></sslThumbprint>"), []byte("<sslThumbprint>"+lease+"</sslThumbprint>"))
		}
	}
	s.Server.Config.Handler = front

	u := *s.URL
	u.User = nil
	fmt.Printf("READY %s %s%s\n", u.String(), trustFile, esxInfo)

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
