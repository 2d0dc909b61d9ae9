// Command etcdauth sets the root user's password in an etcd data file that no etcd is running on: the members'
// restore init container runs it on each member's freshly restored database, so a cluster restored from a snapshot
// taken before a RotateAuth takes the password the auth Secret holds now, not the one of the snapshot (which may be
// the very password that was rotated away because it leaked).
//
//	etcdauth set-root --db FILE     (the password, exactly, on standard input: never in argv, which any process can read)
//
// It writes what etcd's own UserAdd, UserGrantRole(root) and AuthEnable would have left in the file: the "root"
// user with a bcrypt hash of the password and the "root" role, authentication enabled, and the auth revision one
// higher (etcd keys its token and permission caches on it). The keyspace is not touched, so HashKV and the
// revisions stay the snapshot's. It prints one JSON line saying what it changed, never the password or its hash.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"golang.org/x/crypto/bcrypt"
)

// etcd's names for its auth buckets and keys (server/storage/schema), stable since etcd 3.2.
var (
	bucketAuth      = []byte("auth")
	bucketAuthUsers = []byte("authUsers")
	keyEnabled      = []byte("authEnabled")
	keyRevision     = []byte("authRevision")
)

const (
	rootUser = "root"
	rootRole = "root"
	// etcd's default --bcrypt-cost: a login costs what it costs for a password set by UserChangePassword.
	bcryptCost       = bcrypt.DefaultCost
	maxPasswordBytes = 72 // bcrypt's limit: etcd refuses longer ones too
)

type outcome struct {
	DB           string `json:"db"`
	UserCreated  bool   `json:"userCreated"`
	RoleGranted  bool   `json:"roleGranted"`
	AuthWasOn    bool   `json:"authWasOn"`
	AuthRevision uint64 `json:"authRevision"`
}

func readPassword(in io.Reader) (string, error) {
	// All of it, byte for byte: the operator logs in with the Secret's value exactly as stored, a trailing newline
	// included, so the password set here must be that value too.
	raw, err := io.ReadAll(io.LimitReader(in, 4096))
	if err != nil {
		return "", fmt.Errorf("reading the password from standard input: %w", err)
	}
	if len(raw) == 0 {
		return "", errors.New("no password on standard input: pipe the root password in")
	}
	if len(raw) > maxPasswordBytes {
		return "", fmt.Errorf("the password is %d bytes; bcrypt (and etcd) take at most %d", len(raw), maxPasswordBytes)
	}
	return string(raw), nil
}

func setRoot(path, password string) (outcome, error) {
	out := outcome{DB: path}
	if _, err := os.Stat(path); err != nil {
		return out, fmt.Errorf("no etcd database at %s: %w", path, err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcryptCost)
	if err != nil {
		return out, fmt.Errorf("hashing the password: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return out, fmt.Errorf("opening %s (is an etcd running on it?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		users, err := tx.CreateBucketIfNotExists(bucketAuthUsers)
		if err != nil {
			return err
		}
		auth, err := tx.CreateBucketIfNotExists(bucketAuth)
		if err != nil {
			return err
		}
		user := &authpb.User{Name: []byte(rootUser)}
		if raw := users.Get([]byte(rootUser)); raw != nil {
			if err := user.Unmarshal(raw); err != nil {
				return fmt.Errorf("the root user's record does not decode: %w", err)
			}
		} else {
			out.UserCreated = true
		}
		user.Password = hash
		user.Options = &authpb.UserAddOptions{NoPassword: false}
		if !slices.Contains(user.Roles, rootRole) {
			user.Roles = append(user.Roles, rootRole)
			slices.Sort(user.Roles) // etcd keeps a user's roles sorted
			out.RoleGranted = true
		}
		encoded, err := user.Marshal()
		if err != nil {
			return err
		}
		if err := users.Put([]byte(rootUser), encoded); err != nil {
			return err
		}
		enabled := auth.Get(keyEnabled)
		out.AuthWasOn = len(enabled) == 1 && enabled[0] == 1
		if err := auth.Put(keyEnabled, []byte{1}); err != nil {
			return err
		}
		var revision uint64
		if raw := auth.Get(keyRevision); len(raw) == 8 {
			revision = binary.BigEndian.Uint64(raw)
		}
		out.AuthRevision = revision + 1
		next := make([]byte, 8)
		binary.BigEndian.PutUint64(next, out.AuthRevision)
		return auth.Put(keyRevision, next)
	})
	if closeErr := db.Close(); err == nil {
		err = closeErr
	}
	return out, err
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "set-root" {
		fmt.Fprintln(os.Stderr, "usage: etcdauth set-root --db FILE   (the root password on standard input)")
		os.Exit(2)
	}
	flags := flag.NewFlagSet("set-root", flag.ExitOnError)
	path := flags.String("db", "", "the etcd database file (<data-dir>/member/snap/db); no etcd may run on it")
	_ = flags.Parse(os.Args[2:])
	if *path == "" {
		fmt.Fprintln(os.Stderr, "etcdauth set-root: --db is required")
		os.Exit(2)
	}
	password, err := readPassword(os.Stdin)
	if err == nil {
		var out outcome
		if out, err = setRoot(*path, password); err == nil {
			_ = json.NewEncoder(os.Stdout).Encode(out)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "etcdauth set-root:", err)
	os.Exit(1)
}
