// playground.mjs drives TaskFlow's playground in Debian's Chromium with
// playwright-core, the way an admin uses it: open the page, open the first
// example tab about the audit log (auditEvents), paste a token into its
// Headers editor, fill in the workspace id, run it, and read the result pane. It prints one JSON object
// on stdout; the assertions are made by the Go test (e2e/playground_test.go).
//
// usage: node playground.mjs <base url> <token> <workspace id> <screenshot.png>
// env: CHROMIUM (default /usr/bin/chromium)
import { chromium } from 'playwright-core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const [baseURL, token, workspaceId, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node playground.mjs <base url> <token> <workspace id> <screenshot.png>');
  process.exit(2);
}

// The flags the machine's environment notes give for Chromium in a closed
// network: without the background-networking ones it keeps dialling Google.
const args = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const out = { steps: [], consoleErrors: [], pageErrors: [], foreignRequests: [], failedRequests: [] };
const step = (s) => out.steps.push(s);
const userDataDir = await mkdtemp(path.join(tmpdir(), 'taskflow-chromium-'));
let context;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args,
    viewport: { width: 1440, height: 1000 },
    timeout: 60_000,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(30_000);
  const origin = new URL(baseURL).origin;
  page.on('console', (m) => { if (m.type() === 'error') out.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => out.pageErrors.push(String(e)));
  page.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith(origin + '/') && !u.startsWith('data:') && !u.startsWith('blob:')) out.foreignRequests.push(u);
  });
  page.on('requestfailed', (r) => out.failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`));

  const res = await page.goto(baseURL + '/', { waitUntil: 'load' });
  out.pageStatus = res.status();
  await page.locator('.graphiql-container').waitFor();
  step('page loaded');
  out.tabs = await page.locator('.graphiql-tab').allInnerTexts();

  // Open the first example tab that browses the audit log.
  const auditTab = page.locator('.graphiql-tab', { hasText: 'Audit' }).first();
  out.chosenTab = (await auditTab.innerText()).trim();
  await auditTab.locator('.graphiql-tab-button').click();
  await page.locator('.graphiql-tab[aria-selected="true"]', { hasText: out.chosenTab }).waitFor();
  step(`tab ${out.chosenTab} opened`);

  // Editors are CodeMirror instances; an admin clicks into one, selects all
  // and pastes. insertText is a paste: no keystrokes for auto-closed brackets.
  const paste = async (editor, text) => {
    await editor.locator('.CodeMirror').click();
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.insertText(text);
  };
  const visibleEditor = page.locator('.graphiql-editor-tool .graphiql-editor:not(.hidden)');

  // Sign in: the Headers editor is open at start with the placeholder.
  await page.getByRole('button', { name: 'Headers', exact: true }).click();
  out.headersBefore = await visibleEditor.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  await paste(visibleEditor, JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2));
  out.headersAfter = await visibleEditor.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  step('token pasted into the Headers editor');

  await page.getByRole('button', { name: 'Variables', exact: true }).click();
  await paste(visibleEditor, JSON.stringify({ workspaceId }, null, 2));
  step('workspace id in Variables');

  await page.locator('.graphiql-execute-button').click();
  step('query run');
  const result = page.locator('.result-window');
  await result.filter({ hasText: /"auditEvents"|"errors"/ }).waitFor();
  step('result shown');
  out.resultText = await result.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  out.visibleResultText = await result.innerText();
  // The documentation explorer is open, showing the schema's root types.
  out.docsText = await page.locator('.graphiql-plugin').innerText().catch(() => '');
  await page.screenshot({ path: screenshot, fullPage: false });
  out.screenshot = screenshot;
  step('screenshot saved');
} catch (err) {
  out.error = String(err && err.stack ? err.stack : err);
  try {
    const page = context?.pages()[0];
    if (page) {
      await page.screenshot({ path: screenshot });
      out.screenshot = screenshot;
    }
  } catch {}
} finally {
  await context?.close().catch(() => {});
  await rm(userDataDir, { recursive: true, force: true }).catch(() => {});
}
console.log(JSON.stringify(out));
