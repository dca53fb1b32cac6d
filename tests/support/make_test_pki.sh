#!/usr/bin/env bash
# Makes the certificates of the security tests in DIR with openssl:
#   ca.{crt,key}         the cluster CA (signs everything below unless said)
#   other-ca.{crt,key}   a CA trainsupd does not trust
#   server.{crt,key}     trainsupd: DNS trainsupd, IP 127.0.0.1
#   server2.{crt,key}    trainsupd again, signed by other-ca (for the reload test)
#   agent-n1.{crt,key}   an agent: URI trainsup:node:n1
#   agent-n2dns.{crt,key} an agent named by DNS SAN n2
#   operator.{crt,key}   URI trainsup:role:operator
#   reader.{crt,key}     a certificate naming neither a node nor a role
#   stranger.{crt,key}   URI trainsup:role:operator, but signed by other-ca
#   expired.{crt,key}    URI trainsup:role:operator, valid only in January 2020
#   token                a 64-hex-digit operator token
# Usage: make_test_pki.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
export OPENSSL_CONF=/dev/null  # no system defaults: every field is given here

ca() {  # ca NAME CN
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
    -out "$1.crt" -days 30 -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
}

leaf() {  # leaf NAME CA SAN
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
    -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial \
    -out "$1.crt" -days 30 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca "trainsup test CA"
ca other-ca "some other CA"
leaf server ca "DNS:trainsupd,IP:127.0.0.1"
leaf server2 other-ca "DNS:trainsupd,IP:127.0.0.1"
leaf agent-n1 ca "URI:trainsup:node:n1"
leaf agent-n2dns ca "DNS:n2"
leaf operator ca "URI:trainsup:role:operator"
leaf reader ca "URI:trainsup:role:reader"
leaf stranger other-ca "URI:trainsup:role:operator"

# An expired certificate needs explicit dates, which only `openssl ca` takes.
mkdir -p ca-db
: > ca-db/index.txt
cat > ca-db/openssl.cnf <<CNF
[ ca ]
default_ca = test
[ test ]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = anything
copy_extensions = none
x509_extensions = leaf
[ anything ]
commonName = supplied
[ leaf ]
subjectAltName = URI:trainsup:role:operator
extendedKeyUsage = clientAuth
CNF
echo 1000 > ca-db/serial
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout expired.key \
  -out expired.csr -subj "/CN=expired" 2>/dev/null
openssl ca -batch -config ca-db/openssl.cnf -cert ca.crt -keyfile ca.key -in expired.csr \
  -out expired.crt -startdate 20200101000000Z -enddate 20200102000000Z -notext 2>/dev/null
rm -f expired.csr

openssl rand -hex 32 > token
chmod 600 ./*.key token
