// Package e2e holds TaskFlow's end-to-end tests through real clients: the
// playground driven in Debian's Chromium by playwright-core, the graphql-http
// GraphQL-over-HTTP audit, and file uploads by Apollo Client with
// apollo-upload-client. Their Node.js side lives in e2e/node
// (package.json and package-lock.json; `npm ci` there installs it, and the
// tests run it themselves when node_modules is missing).
//
// Prerequisites: node and npm, and /usr/bin/chromium (Debian's chromium
// package) for the browser test. A missing prerequisite skips the test on a
// developer machine and fails it when CI is set.
package e2e
