// browser.mjs is what the browser tests share: Chromium launched by
// playwright-core with the flags a closed network needs, the page's errors
// and requests recorded, the editors of GraphiQL filled in as a person pastes,
// and one JSON report printed on stdout (the Go tests make the assertions).
import { chromium } from 'playwright-core';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

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

// runInBrowser opens a page of a fresh Chromium profile, records console
// errors, page errors, requests to other origins than baseURL's and failed
// requests in the report, runs fn({ context, page, out, step, paste,
// visibleEditor }), saves a screenshot (also when fn throws: out.error) and
// prints the report.
export async function runInBrowser(baseURL, screenshot, fn) {
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
      if (!u.startsWith(origin + '/') && !u.startsWith(origin.replace(/^http/, 'ws') + '/') &&
        !u.startsWith('data:') && !u.startsWith('blob:')) out.foreignRequests.push(u);
    });
    page.on('requestfailed', (r) => out.failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`));
    // Editors are CodeMirror instances; a person clicks into one, selects all
    // and pastes. insertText is a paste: no keystrokes for auto-closed brackets.
    const paste = async (editor, text) => {
      await editor.locator('.CodeMirror').click();
      await page.keyboard.press('ControlOrMeta+A');
      await page.keyboard.insertText(text);
    };
    const visibleEditor = page.locator('.graphiql-editor-tool .graphiql-editor:not(.hidden)');
    await fn({ context, page, out, step, paste, visibleEditor });
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
}

// openPlayground loads the playground at baseURL and lists its tabs.
export async function openPlayground({ page, out, step }, baseURL) {
  const res = await page.goto(baseURL + '/', { waitUntil: 'load' });
  out.pageStatus = res.status();
  await page.locator('.graphiql-container').waitFor();
  step('page loaded');
  out.tabs = await page.locator('.graphiql-tab').allInnerTexts();
}

// openTab selects the first tab whose title contains name.
export async function openTab({ page, out, step }, name) {
  const tab = page.locator('.graphiql-tab', { hasText: name }).first();
  out.chosenTab = (await tab.innerText()).trim();
  await tab.locator('.graphiql-tab-button').click();
  await page.locator('.graphiql-tab[aria-selected="true"]', { hasText: out.chosenTab }).waitFor();
  step(`tab ${out.chosenTab} opened`);
}

// signIn pastes the token into the tab's Headers editor (open at start with
// the placeholder, recorded as headersBefore/headersAfter) and variables
// into its Variables editor.
export async function signIn({ page, out, step, paste, visibleEditor }, token, variables) {
  const value = () => visibleEditor.locator('.CodeMirror').evaluate((el) => el.CodeMirror.getValue());
  await page.getByRole('button', { name: 'Headers', exact: true }).click();
  out.headersBefore = await value();
  await paste(visibleEditor, JSON.stringify({ Authorization: `Bearer ${token}` }, null, 2));
  out.headersAfter = await value();
  step('token pasted into the Headers editor');
  await page.getByRole('button', { name: 'Variables', exact: true }).click();
  await paste(visibleEditor, JSON.stringify(variables, null, 2));
  step('variables pasted');
}
