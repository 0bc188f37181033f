// playground-live.mjs drives the playground's live audit tab in Debian's
// Chromium with playwright-core, as an admin watching an incident does: open
// the page, open the LiveAudit tab, paste a token and the workspace id, start
// it, then make a change in another window (a second page of the same
// browser runs createTask through the API) and read the event as it arrives
// in the result pane. It prints one JSON object on stdout; the assertions are
// made by the Go test (e2e/live_test.go).
//
// usage: node playground-live.mjs <base url> <token> <workspace id> <project id> <screenshot.png>
// env: CHROMIUM (default /usr/bin/chromium)
import { chromium } from 'playwright-core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const [baseURL, token, workspaceId, projectId, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error('usage: node playground-live.mjs <base url> <token> <workspace id> <project id> <screenshot.png>');
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
  const liveTab = page.locator('.graphiql-tab', { hasText: 'LiveAudit' }).first();
  out.chosenTab = (await liveTab.innerText()).trim();
  await liveTab.locator('.graphiql-tab-button').click();
  await page.locator('.graphiql-tab[aria-selected="true"]', { hasText: out.chosenTab }).waitFor();
  step(`tab ${out.chosenTab} opened`);

  const paste = async (editor, text) => {
    await editor.locator('.CodeMirror').click();
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.insertText(text);
  };
  const visibleEditor = page.locator('.graphiql-editor-tool .graphiql-editor:not(.hidden)');
  await page.getByRole('button', { name: 'Headers', exact: true }).click();
  await paste(visibleEditor, JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2));
  await page.getByRole('button', { name: 'Variables', exact: true }).click();
  await paste(visibleEditor, JSON.stringify({ workspaceId }, null, 2));
  step('token and workspace id pasted');

  await page.locator('.graphiql-execute-button').click();
  step('subscription started');
  const result = page.locator('.result-window');

  // Another window makes changes until one shows up (the first may commit
  // before the subscription is open on the server).
  const other = await context.newPage();
  await other.goto(baseURL + '/', { waitUntil: 'load' });
  out.createdTaskIds = [];
  let seen = false;
  for (let i = 0; i < 40 && !seen; i++) {
    const id = await other.evaluate(async ([t, p, title]) => {
      const r = await fetch('/query', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${t}` },
        body: JSON.stringify({ query: 'mutation($p: ID!, $t: String!) { createTask(input: {projectId: $p, title: $t}) { id } }', variables: { p, t: title } }),
      });
      return (await r.json()).data.createTask.id;
    }, [token, projectId, `incident ${i}`]);
    out.createdTaskIds.push(id);
    try {
      await result.filter({ hasText: id }).waitFor({ timeout: 1500 });
      seen = true;
    } catch {}
  }
  step(seen ? 'event arrived' : 'no event arrived');
  out.resultText = await result.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  out.visibleResultText = await result.innerText();
  out.stopButton = await page.locator('.graphiql-execute-button').getAttribute('aria-label');
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
