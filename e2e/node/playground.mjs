// playground.mjs drives TaskFlow's playground in Debian's Chromium with
// playwright-core, the way an admin uses it: open the page, open the first
// example tab about the audit log (auditEvents), paste a token into its
// Headers editor, fill in the workspace id, run it, and read the result pane. It prints one JSON object
// on stdout; the assertions are made by the Go test (e2e/playground_test.go).
//
// usage: node playground.mjs <base url> <token> <workspace id> <screenshot.png>
// env: CHROMIUM (default /usr/bin/chromium)
import { openPlayground, openTab, runInBrowser, signIn } from './browser.mjs';

const [baseURL, token, workspaceId, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node playground.mjs <base url> <token> <workspace id> <screenshot.png>');
  process.exit(2);
}

await runInBrowser(baseURL, screenshot, async (b) => {
  const { page, out, step } = b;
  await openPlayground(b, baseURL);
  // The first example tab that browses the audit log.
  await openTab(b, 'Audit');
  await signIn(b, token, { workspaceId });

  await page.locator('.graphiql-execute-button').click();
  step('query run');
  const result = page.locator('.result-window');
  await result.filter({ hasText: /"auditEvents"|"errors"/ }).waitFor();
  step('result shown');
  out.resultText = await result.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  out.visibleResultText = await result.innerText();
  // The documentation explorer is open, showing the schema's root types.
  out.docsText = await page.locator('.graphiql-plugin').innerText().catch(() => '');
});
