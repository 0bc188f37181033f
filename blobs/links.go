package blobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strconv"
	"time"

	"taskflow/errs"
)

// Download links: Attachment.downloadUrl is GET /attachments/{id} signed for
// the user who asked, so that a browser can follow it without an
// Authorization header (an <a href>, an <img src>). The signature (HMAC-SHA256
// with the deployment's key, the same on every instance) covers the
// attachment, the user and the expiry; the download still checks that the
// user is a member of the attachment's workspace.
const (
	// LinkTTL is how long a download link is valid at least.
	LinkTTL = 15 * time.Minute
	// linkStep rounds expiries up, so that a link stays the same for a few
	// minutes (a browser's cache can serve it again) and is valid for LinkTTL
	// to LinkTTL+linkStep.
	linkStep = 5 * time.Minute
)

// DownloadPath is the path of an attachment's download route.
func DownloadPath(attachmentID string) string { return "/attachments/" + url.PathEscape(attachmentID) }

// DownloadURL returns the download link of the attachment for the user, as
// a path with its query (relative to the server's origin), valid from now
// for LinkTTL at least.
func (s *Store) DownloadURL(attachmentID, userID string, now time.Time) string {
	exp := now.Add(LinkTTL).Truncate(linkStep).Add(linkStep).Unix()
	q := url.Values{"u": {userID}, "e": {strconv.FormatInt(exp, 10)}, "s": {s.sign(attachmentID, userID, exp)}}
	return DownloadPath(attachmentID) + "?" + q.Encode()
}

// sign is the signature of a link.
func (s *Store) sign(attachmentID, userID string, exp int64) string {
	m := hmac.New(sha256.New, s.linkKey)
	m.Write([]byte("taskflow download\x00" + attachmentID + "\x00" + userID + "\x00" + strconv.FormatInt(exp, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// errBadLink answers a link that was not made by the server: it says nothing
// of the attachment, as for one that does not exist.
var errBadLink = errs.Errorf(errs.CodeNotFound, "attachment not found")

// ErrLinkExpired answers a genuine link past its expiry.
var ErrLinkExpired = errs.Errorf(errs.CodeForbidden,
	"this download link has expired: ask for the attachment's downloadUrl again")

// LinkUser returns the user a download link of the attachment was made for
// (query holds its u, e and s parameters): NOT_FOUND for a link the server did
// not sign for this attachment, ErrLinkExpired for one past its expiry.
func (s *Store) LinkUser(attachmentID string, query url.Values, now time.Time) (string, error) {
	userID, sig := query.Get("u"), query.Get("s")
	exp, err := strconv.ParseInt(query.Get("e"), 10, 64)
	if err != nil || userID == "" || !hmac.Equal([]byte(sig), []byte(s.sign(attachmentID, userID, exp))) {
		return "", errBadLink
	}
	if now.Unix() > exp {
		return "", ErrLinkExpired
	}
	return userID, nil
}

// Signed reports whether a download request carries link parameters.
func Signed(query url.Values) bool { return query.Has("s") }
