-- Owned by the scene module: a campaign's own section shares (JSON `BudgetPlan`), saved
-- from the Budgets panel or `campaign budgets`; NULL: the config file's `[scene.budgets]`.
ALTER TABLE campaigns ADD COLUMN budgets_json TEXT;
