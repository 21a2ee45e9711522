-- 0010_reserved_quotas: placeholder holding this version on the secrets branch only, so
-- 0011 applies in sequence here. Lead: drop this file at merge in favour of
-- the real migration of that number.
SELECT 1;
