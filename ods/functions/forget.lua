-- forget: drop entries whose values never arrived (their write was refused). Arguments: pairs
-- of tier letter and sample. Returns the dropped {letter, sample} pairs.
for k = a, #args, 2 do drop(tonumber(args[k + 1]), args[k]) end
return noted()
