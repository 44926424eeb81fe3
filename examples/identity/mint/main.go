// Command mint issues a token for the example Issuer in examples/identity:
// an ES256 JWT signed with the example's key (mint/key.pem, whose public
// half is jwks.json). The key is a published example: never trust it
// outside a demonstration.
//
//	cd examples/identity && go run ./mint -sub alice -scope call
//
// The token is printed on the last line.
package main

import (
	"crypto/x509"
	_ "embed"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

//go:embed key.pem
var keyPEM []byte

// The values examples/identity/issuer.yaml expects.
const (
	issuer   = "https://idp.example.test/demo"
	audience = "toolsvc"
	keyID    = "demo-1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mint:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mint", flag.ContinueOnError)
	sub := fs.String("sub", "", "the token's subject (the caller is demo:SUB)")
	scope := fs.String("scope", "call", "space-separated scopes (call, approve)")
	aud := fs.String("aud", audience, "the audience")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	var extra claimFlags
	fs.Var(&extra, "claim", "an extra string claim, name=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sub == "" {
		return errors.New("-sub is required")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return errors.New("key.pem holds no PEM block")
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", keyID))
	if err != nil {
		return err
	}
	now := time.Now()
	claims := map[string]any{
		"iss": issuer, "sub": *sub, "aud": *aud, "scope": *scope,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(*ttl).Unix(),
	}
	for k, v := range extra {
		claims[k] = v
	}
	token, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "token for caller demo:%s (scope %q), valid until %s\n", *sub, *scope, now.Add(*ttl).UTC().Format(time.RFC3339))
	fmt.Println(token)
	return nil
}

type claimFlags map[string]string

func (c *claimFlags) String() string { return "" }

func (c *claimFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("-claim wants name=value, got %q", v)
	}
	if *c == nil {
		*c = claimFlags{}
	}
	(*c)[k] = val
	return nil
}
