package hamaster

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"sort"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
)

// User data layout. A replica's user data is a MIME multipart document
// (the form cloud-init accepts) with two parts, the AWS counterparts of
// kube-up's "kube-env" and "kube-master-certs" metadata:
//
//   - "kube-env" (text/x-kube-env): KEY='value' lines, sorted: the
//     template's Env plus KUBE_VERSION (Template.Version) and
//     APISERVER_EXTRA_ARGS (Template.ExtraArgs, space-separated);
//   - "kube-master-certs" (text/x-kube-master-certs): one line per
//     certificate file, "<base name>: <base64 of the PEM>".
//
// EC2 limits user data to 16 KB before base64; a replica's certificates
// and env are ~6 KB.
const (
	partEnv          = "kube-env"
	partCerts        = "kube-master-certs"
	userDataBoundary = "hamaster-user-data-boundary"
	maxUserData      = 16 << 10
)

// EncodeUserData renders a template's user data (not base64-encoded).
func EncodeUserData(t providers.Template) ([]byte, error) {
	env := map[string]string{}
	for k, v := range t.Env {
		env[k] = v
	}
	env[kubeenv.KubeVersion] = t.Version
	if len(t.ExtraArgs) > 0 {
		env[kubeenv.APIServerExtraArgs] = strings.Join(t.ExtraArgs, " ")
	}
	var buf bytes.Buffer
	buf.WriteString("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"" + userDataBoundary + "\"\r\n\r\n")
	w := multipart.NewWriter(&buf)
	if err := w.SetBoundary(userDataBoundary); err != nil {
		return nil, err
	}
	part := func(name, ctype string, body []byte) error {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", ctype+"; charset=\"us-ascii\"")
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		pw, err := w.CreatePart(h)
		if err != nil {
			return err
		}
		_, err = pw.Write(body)
		return err
	}
	if err := part(partEnv, "text/x-kube-env", []byte(kubeenv.Render(env))); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.Files))
	for n := range t.Files {
		if strings.ContainsAny(n, "/\\: \n") {
			return nil, errkind.Errorf(errkind.InvalidArgument, "template file name %q must be a base name", n)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	var cb strings.Builder
	for _, n := range names {
		fmt.Fprintf(&cb, "%s: %s\n", n, base64.StdEncoding.EncodeToString(t.Files[n]))
	}
	if err := part(partCerts, "text/x-kube-master-certs", []byte(cb.String())); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > maxUserData {
		return nil, errkind.Errorf(errkind.InvalidArgument, "user data is %d bytes; EC2 allows %d", buf.Len(), maxUserData)
	}
	return buf.Bytes(), nil
}

// DecodeUserData parses user data written by EncodeUserData back into a
// template (Machine left empty).
func DecodeUserData(b []byte) (providers.Template, error) {
	t := providers.Template{Env: map[string]string{}, Files: map[string][]byte{}, Machine: map[string]string{}}
	if len(bytes.TrimSpace(b)) == 0 {
		return t, nil
	}
	hdr, body, ok := bytes.Cut(b, []byte("\r\n\r\n"))
	if !ok {
		return t, errkind.Errorf(errkind.InvalidArgument, "user data is not a MIME multipart document")
	}
	var boundary string
	for _, line := range strings.Split(string(hdr), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Content-Type") {
			if _, params, err := mime.ParseMediaType(strings.TrimSpace(v)); err == nil {
				boundary = params["boundary"]
			}
		}
	}
	if boundary == "" {
		return t, errkind.Errorf(errkind.InvalidArgument, "user data: no multipart boundary")
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return t, errkind.Errorf(errkind.InvalidArgument, "user data: %w", err)
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return t, errkind.Errorf(errkind.InvalidArgument, "user data part %s: %w", part.FileName(), err)
		}
		switch part.FileName() {
		case partEnv:
			env, err := kubeenv.Parse(string(data))
			if err != nil {
				return t, errkind.Errorf(errkind.InvalidArgument, "user data %s: %w", partEnv, err)
			}
			t.Version = env[kubeenv.KubeVersion]
			t.ExtraArgs = strings.Fields(env[kubeenv.APIServerExtraArgs])
			delete(env, kubeenv.KubeVersion)
			delete(env, kubeenv.APIServerExtraArgs)
			t.Env = env
		case partCerts:
			for _, line := range strings.Split(string(data), "\n") {
				n, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
				if !ok {
					continue
				}
				pem, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return t, errkind.Errorf(errkind.InvalidArgument, "user data %s: %s: %w", partCerts, n, err)
				}
				t.Files[n] = pem
			}
		}
	}
	return t, nil
}

// UserData is hamaster's master format on a provider that carries one
// document, the user data (providers.CarrierUserData: AWS): the MIME
// layout above (EncodeUserData, DecodeUserData). A version is
// KUBE_VERSION: nothing to download, nothing to check.
type UserData struct{}

var _ providers.Format = UserData{}

// Owns implements providers.Format: the user data.
func (UserData) Owns(key string) bool { return key == providers.DocUserData }

// Decode implements providers.Format.
func (UserData) Decode(docs map[string]string) (providers.Template, error) {
	return DecodeUserData([]byte(docs[providers.DocUserData]))
}

// Encode implements providers.Format.
func (UserData) Encode(_ context.Context, t providers.Template) (map[string]string, error) {
	ud, err := EncodeUserData(t)
	if err != nil {
		return nil, err
	}
	return map[string]string{providers.DocUserData: string(ud)}, nil
}
