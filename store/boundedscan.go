package store

import "strconv"

// boundedScanSQL returns the query of a scan that looks at no more than
// maxScan rows to find limit that match: the rows of inner (a SELECT with
// no ORDER BY or LIMIT) in order (inner's columns, unqualified, as in
// "occurred_at DESC, id DESC"), at most maxScan of them, each numbered
// from 1 (rn), marked when it meets hit (a condition on inner's columns,
// "true" for every row) and when another row follows it (more). It
// selects sel (over the numbered rows, named scan: inner's columns, then
// rn, more and hit; and over join's relations) of the first limit rows
// that hit and, when fewer do, of the last row looked at, whose rn tells
// how many were looked at, in order: a caller whose read found too few
// goes on from that row when its rn is maxScan and more is set. join (""
// for none) joins scan to more relations for the rows kept only, before
// the limit: a lateral join to scan stays a nested loop over them.
//
// The scan reads one row past maxScan, neither looked at (rn <= maxScan)
// nor returned: its lead tells the last row looked at whether another
// follows (more), so that a read that looked at exactly maxScan rows of a
// list that has no more is not cut short (a page of auditEvents over
// exactly AuditScanLimit events said hasNextPage, and the client paid for
// an empty page). The window functions read the ordered scan as they go
// (row_number's bound stops the window at maxScan), so when inner's
// order is an index's the scan stops as soon as limit rows are kept.
func boundedScanSQL(sel, inner, join, order, hit string, maxScan, limit int) string {
	n := strconv.Itoa(maxScan)
	return `SELECT ` + sel + ` FROM (
			SELECT c.*, row_number() OVER w AS rn, lead(true) OVER w IS NOT NULL AS more, (` + hit + `) AS hit
			FROM (` + inner + ` ORDER BY ` + order + ` LIMIT ` + strconv.Itoa(maxScan+1) + `) c
			WINDOW w AS (ORDER BY ` + order + `)) scan` + join + `
		WHERE scan.rn <= ` + n + ` AND (scan.hit OR NOT scan.more OR scan.rn = ` + n + `)
		ORDER BY ` + order + ` LIMIT ` + strconv.Itoa(limit)
}
